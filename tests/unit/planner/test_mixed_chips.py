"""Plan and simulate on a cluster with a 910B3 node and a 910C node: every instance is priced on the chip of the
nodes it runs on, never on the first node's."""

from dataclasses import replace

import pytest
import yaml

from ascend_pd.deploy import parse_deployment, validate
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.context import chip_group_costs, cost_model
from ascend_pd.perf.on_chip import whole_cluster
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.chip_groups import plan_chip_groups
from ascend_pd.planner.deployment_simulation import simulate_deployment_file
from ascend_pd.planner.modes import instance_cost
from ascend_pd.planner.plan import PlanInputs, make_plan
from tests.mixed_chips import deployment, instance, write_clusters

SHAPE = Shape(tp=4)
BATCH, CONTEXT = 128, 512  # per DP rank: a batch large enough that the step's compute, not its weights, shows
WORKLOAD = Workload(input_tokens=LengthDistribution(mean=1024, p99=4000, distribution="lognormal"),
                    output_tokens=LengthDistribution(mean=256, p99=1000, distribution="lognormal"), rate=4.0)
SLO_HERE = SLO(ttft_ms=2000, tpot_ms=60, attainment=0.9)


def device_work(cost) -> float:
    """The chip's own work in one decode step. The step's total can hide it: an async engine's step is the longer of
    the device's and the host's work, and the default profile's host work per step exceeds this shape's kernels."""
    parts = cost.decode_step(SHAPE, BATCH, CONTEXT).parts
    return parts["compute"] + parts["weights_read"] + parts["kv_read"]


@pytest.fixture
def clusters(tmp_path):
    return write_clusters(tmp_path)


def prefill_and_decode(cluster, p_node: str, d_node: str, d_devices: list[int]) -> dict:
    """P TP4 on devices 0-3 of `p_node`, D TP4 on `d_devices` of `d_node`, under a load that fills D's batch: short
    prompts, long answers, up to 256 sequences."""
    data = deployment(cluster, [instance("prefill-0", "prefill", [(p_node, [0, 1, 2, 3])]),
                                instance("decode-0", "decode", [(d_node, d_devices)])])
    data["workload"].update(rate=6.0, input_tokens={"mean": 128}, output_tokens={"mean": 1024})
    data["instances"][1]["vllm"]["max_num_seqs"] = 256
    return data


def test_each_instance_is_priced_on_its_own_nodes_chip(clusters):
    loaded = parse_deployment(yaml.safe_dump(prefill_and_decode(clusters["mixed"], "b-00", "c-00", [0, 1, 2, 3])),
                              "deployment.yaml")
    base = whole_cluster(get_model("qwen3-32b"), loaded.cluster(), "bf16", "bf16", None)
    prefill, decode = (instance_cost(base, loaded.deployment, i) for i in loaded.deployment.instances)
    assert (prefill.chip.id, decode.chip.id) == ("910b3", "910c")
    only_b, only_c = (cost_model("qwen3-32b", str(clusters[chip])) for chip in ("910b3", "910c"))
    d_tpot = decode.tpot(SHAPE, BATCH, CONTEXT)
    assert d_tpot == replace(only_c, mode=decode.mode).tpot(SHAPE, BATCH, CONTEXT)
    assert device_work(decode) < 0.95 * device_work(replace(only_b, mode=decode.mode))  # node 0's chip
    ttft = prefill.prefill_time(SHAPE, [2048.0]).total
    assert ttft == replace(only_b, mode=prefill.mode).prefill_time(SHAPE, [2048.0]).total
    assert ttft > replace(only_c, mode=prefill.mode).prefill_time(SHAPE, [2048.0]).total


def test_simulated_decode_on_910c_runs_at_the_910c_clusters_tpot_not_the_910b3s(clusters, tmp_path):
    runs = {}
    for name, cluster, p_node, d_node, d_devices in (
            ("mixed", "mixed", "b-00", "c-00", [0, 1, 2, 3]),  # P on 910b3, D on 910c
            ("910b3", "910b3", "b-00", "b-00", [4, 5, 6, 7]),
            ("910c", "910c", "c-00", "c-00", [8, 9, 10, 11])):
        path = tmp_path / f"deployment-{name}.yaml"
        path.write_text(yaml.safe_dump(prefill_and_decode(clusters[cluster], p_node, d_node, d_devices)))
        runs[name] = simulate_deployment_file(path, duration=60).result["tpot_ms"]["p50"]
    assert runs["mixed"] == pytest.approx(runs["910c"], rel=1e-3)
    assert runs["mixed"] < 0.95 * runs["910b3"]


def test_a_mixed_cluster_is_planned_per_chip_group_and_the_better_group_wins(clusters):
    inputs = PlanInputs(WORKLOAD, SLO_HERE, cluster_ref=str(clusters["mixed"]))
    cost, outcome = plan_chip_groups(chip_group_costs("qwen3-32b", str(clusters["mixed"])), inputs)
    alone = {chip: make_plan(cost_model("qwen3-32b", str(clusters[chip])), inputs) for chip in ("910b3", "910c")}
    best = max(alone, key=lambda chip: alone[chip].predicted["goodput_rps"])
    assert cost.chip.id == best
    assert outcome.predicted == alone[best].predicted  # priced on its chip group alone
    node = {"910b3": "b-00", "910c": "c-00"}[best]
    assert {p.node for i in outcome.deployment.instances for p in i.devices} == {node}
    assert outcome.deployment.cluster == str(clusters["mixed"])
    loaded = parse_deployment(yaml.safe_dump(outcome.deployment.model_dump(mode="json", exclude_none=True)),
                              "deployment.yaml")
    assert not [d for d in validate(loaded) if d.severity in ("error", "warning")]


def test_a_device_budget_applies_to_each_chip_group(clusters):
    inputs = PlanInputs(WORKLOAD, SLO_HERE, devices=8, cluster_ref=str(clusters["mixed"]))
    cost, outcome = plan_chip_groups(chip_group_costs("qwen3-32b", str(clusters["mixed"])), inputs)
    assert outcome.budget == 8 and outcome.predicted["devices"] <= 8
    assert load_cluster(clusters["mixed"]).device_count == 24  # the budget is not the whole cluster's
