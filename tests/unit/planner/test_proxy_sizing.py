"""Proxy workers in a plan: sized by the CPU a streamed answer costs the proxy, which grows with the rate and with the
SSE events it relays (one per decode step)."""

import pytest

from ascend_pd.defaults import PROXY_CORE_UTILISATION, PROXY_CPU_PER_EVENT_S, PROXY_CPU_PER_REQUEST_S
from ascend_pd.perf.context import cost_model
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.proxy_sizing import proxy_cores, proxy_workers
from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD


def test_a_trickle_of_requests_still_gets_one_worker():
    assert proxy_workers(0.01, 100) == 1


def test_cores_follow_the_rate_and_the_events_relayed():
    base = proxy_cores(100, 1000)
    assert proxy_cores(200, 1000) == pytest.approx(2 * base)
    # two tokens per decode step (MTP) halve the events, not the per-request part
    halved = proxy_cores(100, 1000, tokens_per_step=2.0)
    assert halved == pytest.approx(100 * (PROXY_CPU_PER_REQUEST_S + 500 * PROXY_CPU_PER_EVENT_S))
    assert base / 2 < halved < base


def test_workers_keep_each_core_below_the_planned_utilisation():
    for rate in (1, 50, 337, 3367):
        workers = proxy_workers(rate, 500, 1.7)
        assert proxy_cores(rate, 500, 1.7) / workers <= PROXY_CORE_UTILISATION
        assert workers == 1 or proxy_cores(rate, 500, 1.7) / (workers - 1) > PROXY_CORE_UTILISATION


def test_a_plan_sizes_its_proxy_for_its_design_rate():
    outcome = make_plan(cost_model("deepseek-r1", "cloudmatrix384"), PlanInputs(DEFAULT_WORKLOAD, DEFAULT_SLO))
    deployment = outcome.deployment
    mean_output = float(outcome.requirements.lengths.output_tokens.mean())
    expected = proxy_workers(deployment.workload.rate, mean_output, outcome.requirements.accepted)
    assert deployment.proxy.workers == expected
    assert expected > 1  # hundreds of requests a second of streamed answers need more than one core
