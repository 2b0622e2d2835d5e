"""The search: monotone in devices and SLO, as good as exhaustive enumeration on a small cluster, and willing to
colocate when colocation wins."""

import itertools

import pytest

from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.perf.context import cost_model
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.capacity import decode_option
from ascend_pd.planner.plan import PlanInputs, make_plan, requirements
from ascend_pd.planner.search import choose, evaluate_options

QWEN_A2 = cost_model("qwen3-32b", "atlas-800i-a2-x4")
WORKLOAD = Workload(input_tokens=LengthDistribution(mean=2048, std=512, distribution="normal"),
                    output_tokens=LengthDistribution(mean=512), rate=4.0)
SLO_A2 = SLO(ttft_ms=1500, tpot_ms=40, attainment=0.9)


def best_rate(devices: int, workload: Workload = WORKLOAD, slo: SLO = SLO_A2) -> float:
    return make_plan(QWEN_A2, PlanInputs(workload, slo, devices=devices)).result.best.rate


def test_more_devices_never_lower_the_best_goodput():
    rates = [best_rate(n) for n in (4, 8, 12, 16, 24, 32)]
    assert all(later >= earlier - 1e-9 for earlier, later in zip(rates, rates[1:])), rates


def test_a_tighter_tpot_never_raises_the_decode_batch():
    req = requirements(QWEN_A2, PlanInputs(WORKLOAD, SLO_A2))
    batches = []
    for tpot_ms in (80, 60, 50, 40, 30, 25, 20):
        option = decode_option(QWEN_A2, Shape(tp=4), req.__class__(**{**req.__dict__, "tpot": tpot_ms / 1e3}))
        batches.append(option.batch_per_rank if option else 0)
    assert batches == sorted(batches, reverse=True), batches
    assert batches[0] > batches[-1]


def exhaustive_best(options, budget: int) -> float:
    """Every prefill and decode option, every count of each that fits, and every colocated count."""
    best = 0.0
    for p, d in itertools.product(options["prefill"], options["decode"]):
        for x in range(1, budget // p.devices + 1):
            for y in range(1, (budget - x * p.devices) // d.devices + 1):
                best = max(best, min(x * p.rate, y * d.rate))
    for c in options["colocated"]:
        best = max(best, (budget // c.devices) * c.rate)
    return best


@pytest.mark.parametrize("budget", [8, 16, 24, 32])
def test_search_reaches_99_percent_of_exhaustive_enumeration(budget):
    req = requirements(QWEN_A2, PlanInputs(WORKLOAD, SLO_A2, devices=budget))
    options = evaluate_options(QWEN_A2, req, budget)
    chosen = choose(options, budget, None).best
    assert chosen.devices <= budget
    assert chosen.rate >= 0.99 * exhaustive_best(options, budget)


def test_short_prompts_at_low_load_on_one_node_colocate():
    # At 1 req/s one colocated instance carries the load; PD needs a prefill and a decode instance at least. The
    # TPOT target leaves room for the prompt chunks a colocated step also runs: at 50 ms vllm-ascend's host work per
    # step (the default profile) leaves Qwen3-32B on A2 no colocated shape at all.
    short = Workload(input_tokens=LengthDistribution(mean=256), output_tokens=LengthDistribution(mean=256), rate=1)
    outcome = make_plan(QWEN_A2, PlanInputs(short, SLO(ttft_ms=2000, tpot_ms=100), devices=8, rate=1.0))
    assert outcome.result.best.kind == "colocated"
    assert outcome.result.best.devices < outcome.result.best_disaggregated.devices


def test_deepseek_on_an_a3_node_group_disaggregates_because_it_sustains_more():
    cost = cost_model("deepseek-r1", "atlas-800t-a3-x4")
    workload = Workload(input_tokens=LengthDistribution(mean=3500, p99=16000, distribution="lognormal"),
                        output_tokens=LengthDistribution(mean=1200), rate=10)
    outcome = make_plan(cost, PlanInputs(workload, SLO(ttft_ms=2000, tpot_ms=50)))
    result = outcome.result
    assert result.best.kind == "disaggregated"
    assert result.best_colocated is None or result.best.rate_per_device > result.best_colocated.rate_per_device
