"""Going back to colocated serving: a colocated bundle, a prefill/decode bundle rendered over it into the same
directory, `ascend-pd rollback`, and the stack started from that directory serves the colocated shape."""

from __future__ import annotations

import json
import urllib.request

import pytest
import yaml

from tests.ports import free_port_range

from .conftest import PORT_BLOCK, case_logs, local_deployment
from .stack import Stack, ascend_pd, http_json, render_as_an_operator
from .workload import completion_body

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GQA = "tiny-llama-gqa"


def served_backends(stack: Stack) -> set[tuple[str, str]]:
    request = urllib.request.Request(f"{stack.proxy_url}/admin/backends",
                                     headers={"Authorization": f"Bearer {stack.admin_token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {(b["url"], b["role"]) for b in json.loads(response.read())}


def test_a_rollback_to_the_colocated_bundle_serves_the_colocated_instance(tiny_models):
    logs = case_logs("rollback")
    port_base = free_port_range(PORT_BLOCK)  # both bundles on the same ports, as one deployment changed would be
    colocated = local_deployment(tiny_models, GQA, colocated=True, eager=True, port_base=port_base)
    disaggregated = local_deployment(tiny_models, GQA, eager=True, port_base=port_base)
    stack = Stack(colocated, logs / "run", logs)
    render_as_an_operator(colocated, stack.workdir, logs, stack.render_dir)
    changed = stack.workdir / "disaggregated.yaml"
    changed.write_text(yaml.safe_dump(disaggregated, sort_keys=False))
    ascend_pd("render", str(changed), "--out", str(stack.render_dir), "--target", "bash")

    said = ascend_pd("rollback", str(stack.render_dir)).stdout
    assert [f"added    {i['name']}:" in said for i in colocated["instances"]] == [True]
    assert all(f"removed  {i['name']}:" in said for i in disaggregated["instances"])

    try:
        stack.launch()
        (url,) = stack.endpoint_urls("colocated")
        assert served_backends(stack) == {(url, "colocated")}
        answer = http_json(f"{stack.proxy_url}/v1/completions", completion_body(GQA, "The rollback test says"))
        assert answer["choices"][0]["text"]
    finally:
        stack.stop()
