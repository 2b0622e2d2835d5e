"""Reading a prefill engine's held KV from its /metrics and waiting for it to reach 0, against a real HTTP server:
engines whose two engine cores release their requests over time, one with another connector (no gauge), one that
answers 500, a black-holed one (accepts, never answers) and a dead port. Every wait is bounded and every error names
the engine."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler

import pytest

from ascend_pd.autoscale.engine_kv import held_requests, wait_kv_released
from ascend_pd.autoscale.proxy_admin import StepFailed
from tests.fakes.threaded_http import Server, send

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
# HELP vllm:ascend_pd_kv_held_requests_by_reason A look-alike name that is another metric.
# TYPE vllm:ascend_pd_kv_held_requests_by_reason gauge
vllm:ascend_pd_kv_held_requests_by_reason{engine="0",model_name="tiny"} 7.0
"""


def held_page(levels: tuple[int, int]) -> str:
    """A vLLM /metrics page with the connector's gauge for two engine cores behind one API server."""
    return VLLM_PAGE + (
        "# HELP vllm:ascend_pd_kv_held_requests Requests whose prompt KV this prefill engine still holds.\n"
        "# TYPE vllm:ascend_pd_kv_held_requests gauge\n"
        f'vllm:ascend_pd_kv_held_requests{{engine="0",model_name="tiny {{v2}}"}} {float(levels[0])}\n'
        f'vllm:ascend_pd_kv_held_requests{{engine="1",model_name="tiny {{v2}}"}} {float(levels[1])}\n')


class Engines:
    """Fake engines behind one server, each at its own path: /<name>/metrics. `pages[name]` maps the seconds since
    `restart()` to the page served, None for a 500."""

    def __init__(self):
        self.pages = {}
        self.versions = {}  # name -> vLLM version GET /version gives (0.32.0 when not named)
        self.started = time.monotonic()
        self.http = Server(self._answer)

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        name, _, rest = handler.path.strip("/").partition("/")
        if rest not in ("metrics", "version") or name not in self.pages:
            handler.send_error(404)
            return
        page = self.pages[name](time.monotonic() - self.started)
        if rest == "version" and page is not None:
            page = json.dumps({"version": self.versions.get(name, "0.32.0")})
        if page is None:
            handler.send_error(500)
            return
        send(handler, 200, page.encode(), "text/plain; version=0.0.4")

    def url(self, name: str) -> str:
        return f"{self.http.url}/{name}"

    def restart(self) -> None:
        self.started = time.monotonic()

    def close(self) -> None:
        self.http.close()


def releasing(after: float):
    """Two engine cores holding 2 and 1 requests, then 1 and 0 a little later, then nothing from `after` s on."""
    def page(elapsed: float) -> str:
        if elapsed >= after:
            return held_page((0, 0))
        return held_page((2, 1) if elapsed < after / 2 else (1, 0))
    return page


@pytest.fixture
def engines():
    fake = Engines()
    fake.pages.update({
        "prefill-a": releasing(after=1.2),
        "prefill-b": releasing(after=0.6),
        "holding": lambda elapsed: held_page((2, 1)),
        "stuck": lambda elapsed: held_page((2, 0)),
        "other-connector": lambda elapsed: VLLM_PAGE,
        "broken": lambda elapsed: None,
        "older-vllm": lambda elapsed: held_page((0, 0)),
    })
    fake.versions["older-vllm"] = "0.11.0"
    fake.restart()
    yield fake
    fake.close()


@pytest.fixture
def black_hole():
    """A port that accepts connections (the kernel completes them into the backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def dead_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there any more
    return f"http://127.0.0.1:{port}"


def test_the_held_count_is_summed_over_the_engine_cores_and_absent_without_the_gauge(engines):
    assert held_requests(engines.url("holding"), timeout=2) == 3
    assert held_requests(engines.url("holding") + "/", timeout=2) == 3
    assert held_requests(engines.url("stuck"), timeout=2) == 2
    assert held_requests(engines.url("other-connector"), timeout=2) is None  # the look-alike name is not it
    # its vLLM may report the gauge a step late or not at all, so its 0 cannot be believed
    assert held_requests(engines.url("older-vllm"), timeout=2) is None


def test_the_wait_ends_when_every_engine_reads_zero(engines):
    urls = [engines.url("prefill-a"), engines.url("prefill-b")]
    said = wait_kv_released(urls, seconds=10, hold_timeout=30)
    elapsed = time.monotonic() - engines.started
    assert 1.2 <= elapsed < 1.2 + 2.0  # the later engine's release, found within a poll or two
    assert all(held_requests(url, timeout=2) == 0 for url in urls)
    assert urls[0] in said and urls[1] in said and "hold limit" not in said


def test_an_engine_that_keeps_holding_fails_the_step_with_its_url_and_count_in_time(engines):
    urls = [engines.url("prefill-b"), engines.url("stuck")]
    started = time.monotonic()
    with pytest.raises(StepFailed) as failed:
        wait_kv_released(urls, seconds=1.0, hold_timeout=30)
    assert time.monotonic() - started < 1.0 + 1.5
    assert f"{engines.url('stuck')} holds 2 request(s)" in str(failed.value)
    assert engines.url("prefill-b") not in str(failed.value)  # it had released by then


def test_an_engine_without_the_gauge_is_given_the_connectors_hold_limit_and_the_wait_says_so(engines):
    urls = [engines.url("prefill-b"), engines.url("other-connector")]
    started = time.monotonic()
    said = wait_kv_released(urls, seconds=10, hold_timeout=1.5)
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 1.5 + 1.0
    assert "hold limit of 1.5 s" in said and engines.url("other-connector") in said
    assert f"released on {engines.url('prefill-b')}" in said


def test_a_black_holed_engine_fails_the_step_within_the_call_timeout_naming_it(engines, black_hole):
    started = time.monotonic()
    with pytest.raises(StepFailed) as failed:
        wait_kv_released([engines.url("prefill-b"), black_hole], seconds=1.0, hold_timeout=30)
    assert time.monotonic() - started < 1.0 + 1.0
    assert black_hole in str(failed.value) and "no answer within" in str(failed.value)
    started = time.monotonic()
    with pytest.raises(StepFailed, match=black_hole):
        held_requests(black_hole, timeout=0.5)
    assert time.monotonic() - started < 0.5 + 0.5


def test_a_dead_or_failing_engine_fails_the_step_at_once_naming_it_and_why(engines, dead_port):
    started = time.monotonic()
    with pytest.raises(StepFailed) as failed:
        wait_kv_released([dead_port], seconds=10, hold_timeout=30)
    assert time.monotonic() - started < 1.0
    assert dead_port in str(failed.value) and "refused" in str(failed.value).lower()
    with pytest.raises(StepFailed) as failed:
        wait_kv_released([engines.url("broken")], seconds=10, hold_timeout=30)
    assert engines.url("broken") in str(failed.value) and "500" in str(failed.value)
