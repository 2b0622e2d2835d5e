"""The simulator runs one of several identical SuperPoD groups when the whole would be too many requests, and its
figures match a simulation of the whole deployment."""

import pytest

from ascend_pd.perf.context import cost_model
from ascend_pd.planner import simulator
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.replicas import identical_groups
from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD


@pytest.fixture(scope="module")
def two_pods():
    cost = cost_model("deepseek-r1", "cloudmatrix384-x2")
    return cost, make_plan(cost, PlanInputs(DEFAULT_WORKLOAD, DEFAULT_SLO)).deployment


def test_a_plan_on_two_superpods_is_two_identical_groups(two_pods):
    cost, deployment = two_pods
    replicas = identical_groups(deployment, cost.cluster)
    assert replicas is not None and replicas.count == 2
    pods = {cost.cluster.node(p.node).superpod for i in replicas.group.instances for p in i.devices}
    assert pods == {0}


def test_superpods_holding_different_instances_are_not_cut(two_pods):
    cost, deployment = two_pods
    last = deployment.instances[-1]
    more_seqs = last.vllm.model_copy(update={"max_num_seqs": last.vllm.max_num_seqs + 1})
    changed = last.model_copy(update={"vllm": more_seqs})
    assert identical_groups(deployment.model_copy(update={"instances": [*deployment.instances[:-1], changed]}),
                            cost.cluster) is None


def test_one_group_at_its_share_of_the_rate_gives_the_whole_deployments_figures(two_pods, monkeypatch):
    cost, deployment = two_pods
    whole = simulator.simulate(deployment, cost, deployment.workload, DEFAULT_SLO, 60.0, 20.0)
    monkeypatch.setattr(simulator, "MAX_SIMULATED_REQUESTS", 0)
    cut = simulator.simulate(deployment, cost, deployment.workload, DEFAULT_SLO, 60.0, 20.0)
    assert (whole["groups"], whole["simulated_groups"]) == (1, 1)
    assert (cut["groups"], cut["simulated_groups"]) == (2, 1)
    assert cut["requests"] == pytest.approx(whole["requests"], rel=0.05)
    assert cut["goodput_rps"] == pytest.approx(whole["goodput_rps"], rel=0.05)
    assert cut["ttft_ms"]["p50"] == pytest.approx(whole["ttft_ms"]["p50"], rel=0.15)
    assert cut["ttft_ms"]["p90"] == pytest.approx(whole["ttft_ms"]["p90"], rel=0.15)
    assert cut["tpot_ms"]["p50"] == pytest.approx(whole["tpot_ms"]["p50"], rel=0.05)
