"""The name plan gives a deployment is one every Kubernetes object render derives from it can carry (APD305)."""

from types import SimpleNamespace

import pytest

from ascend_pd.deploy.rules.names import DNS_LABEL, K8S_NAME_MAX, OBJECT_SUFFIXES
from ascend_pd.planner.placement import _deployment_name


@pytest.mark.parametrize("text", ["Qwen3-32B-atlas-800i-a2-x4", "7b-chat-cm384", "-" + "x" * 100, "模型-a3"])
def test_a_planned_name_is_a_dns_label_that_leaves_room_for_every_object_suffix(text):
    instances = [SimpleNamespace(name="prefill-0"), SimpleNamespace(name="decode-123")]
    name = _deployment_name(text, instances)
    assert DNS_LABEL.fullmatch(name), name
    for suffix in [*OBJECT_SUFFIXES, *(i.name for i in instances)]:
        assert len(f"{name}-{suffix}") <= K8S_NAME_MAX
