"""The simulator: its figures at low load follow from the cost model's pieces, overload breaks the SLO, and the
planner's predicted goodput agrees with it on the shipped example workloads."""

import pytest
import yaml

from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.hardware import configs_dir
from ascend_pd.perf.context import cost_model
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.modes import instance_cost
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.simulator import simulate

QWEN_A2 = cost_model("qwen3-32b", "atlas-800i-a2-x4")


def fixed_workload(prompt: int, output: int, rate: float) -> Workload:
    return Workload(input_tokens=LengthDistribution(mean=prompt), output_tokens=LengthDistribution(mean=output),
                    rate=rate)


def first_device(instance):
    place = instance.devices[0]
    return next(d for d in QWEN_A2.cluster.devices if (d.node, d.local_id) == (place.node, place.devices[0]))


def test_a_lone_request_sees_prefill_then_transfer_then_one_decode_step():
    from ascend_pd.deploy import load_deployment

    loaded = load_deployment(configs_dir() / "deployments" / "atlas-800i-a2-x4-qwen3-32b.yaml")
    deployment = loaded.deployment
    slo = SLO(ttft_ms=5000, tpot_ms=100)
    # One request every 100 s: nobody queues, each runs alone.
    result = simulate(deployment, QWEN_A2, fixed_workload(2048, 64, 0.01), slo, duration=2000, warmup=0)
    p_inst, d_inst = (next(i for i in deployment.instances if i.role == role) for role in ("prefill", "decode"))
    p, d = p_inst.parallel, d_inst.parallel
    # each role priced in the mode its engine runs (eager prefill, graph decode)
    prefill = instance_cost(QWEN_A2, deployment, p_inst).prefill_time(Shape(p.tp, p.dp), [2048.0]).total
    first_step = instance_cost(QWEN_A2, deployment, d_inst).decode_step(Shape(d.tp, d.dp), 1, 2048).total
    # The pull crosses the link between P's and D's devices once the prefill is done.
    assert deployment.connector.mode == "pull"
    link = QWEN_A2.cluster.link_between(*(first_device(i) for i in (p_inst, d_inst)))
    transfer = QWEN_A2.kv_transfer_time(Shape(p.tp), 2048, link)
    # and the server's own way to the first token, outside any engine step
    expected_ms = (prefill + transfer + first_step + QWEN_A2.request_overhead()) * 1e3
    assert result["ttft_ms"]["p50"] == pytest.approx(expected_ms, rel=0.05)
    assert result["slo_attainment"] == 1.0


def test_three_times_the_design_rate_misses_the_slo():
    slo = SLO(ttft_ms=1500, tpot_ms=40)
    workload = fixed_workload(2048, 256, 1.0)
    outcome = make_plan(QWEN_A2, PlanInputs(workload, slo, devices=16))
    design = outcome.predicted["max_rate_rps"]
    over = simulate(outcome.deployment, QWEN_A2, fixed_workload(2048, 256, 3 * design), slo, duration=120,
                    warmup=30)
    assert over["slo_attainment"] < 0.5
    assert over["goodput_rps"] < 1.5 * design


EXAMPLES = sorted(path.stem for path in (configs_dir() / "deployments").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_planner_and_simulator_agree_within_15_percent_on_each_example(example):
    # The example's workload and SLO, planned, then simulated at the plan's design rate: the plan is sized on
    # figures the simulator confirms.
    shipped = yaml.safe_load((configs_dir() / "deployments" / f"{example}.yaml").read_text())
    workload, slo = Workload(**shipped["workload"]), SLO(**shipped["slo"])
    cost = cost_model(shipped["model"]["name"], shipped["cluster"], None, shipped["model"]["quantization"])
    outcome = make_plan(cost, PlanInputs(workload, slo))
    predicted = outcome.predicted
    # Long enough for some 15,000 requests: a 120 s run at 15 req/s puts its p90 anywhere within +-30%.
    duration = max(120.0, 15000 / predicted["rate_rps"])
    simulated = simulate(outcome.deployment, cost, outcome.deployment.workload, slo, duration=duration,
                         warmup=duration / 4)
    assert simulated["ttft_ms"]["p50"] == pytest.approx(predicted["ttft_ms"]["p50"], rel=0.15)
    assert simulated["ttft_ms"]["p90"] == pytest.approx(predicted["ttft_ms"]["p90"], rel=0.15)
    assert simulated["tpot_ms"]["p50"] == pytest.approx(predicted["tpot_ms"], rel=0.15)
    assert simulated["goodput_rps"] == pytest.approx(predicted["goodput_rps"], rel=0.15)
    assert simulated["slo_attainment"] >= slo.attainment - 0.02


@pytest.mark.parametrize("model, cluster, devices, prompt, output, tpot_ms, calibration, tolerance",
                         [("qwen3-32b", "atlas-800i-a2-x4", 8, 256, 256, 100, None, 0.15),
                          # Under vllm-ascend the simulator runs this plan's decode at 51 ms where the planner puts
                          # its operating point at 50 ms, and the run overloads: an open disagreement, so this case
                          # stays on the profile it was written for.
                          ("deepseek-r1", "atlas-800t-a3-x4", 16, 1024, 256, 50, "cloudmatrix-infer", 0.25)])
def test_a_colocated_plan_and_the_simulator_agree(model, cluster, devices, prompt, output, tpot_ms, calibration,
                                                  tolerance):
    # The best colocated deployment on the budget, at the most it sustains within the SLO. The planner routes each
    # prompt as the proxy does, to the one of two ranks that holds fewer requests, decoding ones included. Looser
    # with expert parallelism: the simulator's DP ranks step together, which the planner's fluid queue of one rank
    # does not see (DeepSeek-R1 TTFT p90 1,114 ms simulated against 1,374 planned, under cloudmatrix-infer). Qwen's
    # TPOT target leaves room for the prompt chunks a colocated step runs beside decode.
    from ascend_pd.planner.placement import build_deployment
    from ascend_pd.planner.plan import predict

    cost = cost_model(model, cluster, calibration=calibration)
    slo = SLO(ttft_ms=2000, tpot_ms=tpot_ms)
    workload = fixed_workload(prompt, output, 1.0)
    outcome = make_plan(cost, PlanInputs(workload, slo, devices=devices))
    choice, units = outcome.result.best_colocated, outcome.result.units
    predicted = predict(cost, choice, units, outcome.requirements, devices)
    at_design = workload.model_copy(update={"rate": predicted["rate_rps"]})
    deployment = build_deployment(cost, choice, units, outcome.requirements, at_design, slo, cluster)
    duration = max(120.0, 15000 / predicted["rate_rps"])
    simulated = simulate(deployment, cost, at_design, slo, duration=duration, warmup=duration / 4)
    assert simulated["ttft_ms"]["p50"] == pytest.approx(predicted["ttft_ms"]["p50"], rel=tolerance)
    assert simulated["ttft_ms"]["p90"] == pytest.approx(predicted["ttft_ms"]["p90"], rel=tolerance)
    assert simulated["tpot_ms"]["p50"] == pytest.approx(predicted["tpot_ms"], rel=tolerance)
