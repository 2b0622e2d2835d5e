"""A proxy replica whose admin answers are not of the shape this release reads (another release, or a service that
is not a proxy at all, behind the right token): every call the autoscaler makes fails as a step that names the
replica and what it asked, never with a library's exception, so the loop reports the interval unobservable and a
rollout stops at that step."""

from __future__ import annotations

import json

import pytest

from ascend_pd.autoscale.control_plane import ControlPlane
from ascend_pd.autoscale.proxy_admin import ProxyAdmin, StepFailed
from ascend_pd.proxy.workload_window import WORKLOAD_PARTS
from tests.fakes.threaded_http import Server, send

TOKEN = "admin-secret"
# per path, answers of shapes this release does not read
ODD_ANSWERS = {
    "/admin/backends": [{"url": "http://e:1"}, [{"url": 1, "inflight": 0}], [{"inflight": 2}], [7], None],
    "/admin/table": [[], {"generation": "one", "revision": "r", "backends": []},
                     {"generation": 1, "revision": "r", "backends": [{"url": 3}]}, "table", None],
    WORKLOAD_PARTS: [{"window": 60}, [[1, 2]], ["part"], None],
}


class OddReplica:
    """A replica that answers `answers[path]` (JSON) to each path."""

    def __init__(self):
        self.answers: dict[str, object] = {}
        self.server = Server(lambda handler: send(handler, 200, json.dumps(self.answers.get(handler.path)).encode()))
        self.url = self.server.url


@pytest.fixture(scope="module")
def replica():
    odd = OddReplica()
    yield odd
    odd.server.close()


CALLS = {
    "/admin/backends": [("control plane", lambda url: ControlPlane([url], TOKEN, None, timeout=2).backends()),
                        ("one proxy", lambda url: ProxyAdmin(url, TOKEN, timeout=2).backends())],
    "/admin/table": [("control plane", lambda url: ControlPlane([url], TOKEN, None, timeout=2).table())],
    WORKLOAD_PARTS: [("control plane", lambda url: ControlPlane([url], TOKEN, None, timeout=2).workload())],
}


@pytest.mark.parametrize("path,answer", [(path, answer) for path, answers in ODD_ANSWERS.items()
                                         for answer in answers], ids=repr)
def test_an_answer_of_another_shape_is_a_failed_step_naming_the_replica(replica, path, answer):
    replica.answers = {"/admin/backends": [], "/admin/table": {"generation": 1, "revision": "r", "backends": []},
                       WORKLOAD_PARTS: [], path: answer}
    for who, ask in CALLS[path]:
        with pytest.raises(StepFailed) as failed:
            ask(replica.url)
        assert f"{replica.url}{path}" in str(failed.value), who
