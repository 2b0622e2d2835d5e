"""Each engine is priced in the execution mode its rendered flags give it: a plan in the modes of the engines it
writes, a simulation in each instance's own."""

from pathlib import Path

import yaml

from ascend_pd.deploy.engine_flags import execution_mode
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.hardware import configs_dir
from ascend_pd.hardware.platform import platform_of
from ascend_pd.perf.context import cost_model
from ascend_pd.planner.deployment_simulation import simulate_deployment_file
from ascend_pd.planner.modes import planned_costs
from ascend_pd.planner.plan import PlanInputs, make_plan

A2_EXAMPLE = configs_dir() / "deployments" / "atlas-800i-a2-x4-qwen3-32b.yaml"


def test_a_plan_prices_each_role_in_the_mode_of_the_engine_it_writes():
    for model, cluster, mtp in (("qwen3-32b", "atlas-800i-a2-x4", None), ("deepseek-r1", "atlas-800t-a3-x4", 1)):
        cost = cost_model(model, cluster, calibration="vllm-ascend")
        workload = Workload(input_tokens=LengthDistribution(mean=2048), output_tokens=LengthDistribution(mean=256),
                            rate=2.0)
        outcome = make_plan(cost, PlanInputs(workload, SLO(ttft_ms=4000, tpot_ms=80), rate=2.0, mtp=mtp))
        priced = planned_costs(cost, outcome.requirements.mtp)
        deployment = outcome.deployment
        for instance in deployment.instances:
            rendered = execution_mode(platform_of(cost.cluster), deployment.connector.implementation, instance,
                                      cost.model.mla is not None)
            assert priced[instance.role].mode == rendered, (model, instance.name)


def test_a_decode_instance_the_user_makes_eager_is_simulated_slower(tmp_path: Path):
    raw = yaml.safe_load(A2_EXAMPLE.read_text())
    eager = tmp_path / "eager.yaml"
    for instance in raw["instances"]:
        if instance["role"] == "decode":
            instance.setdefault("vllm", {})["enforce_eager"] = True
    eager.write_text(yaml.safe_dump(raw))
    # the copy names its cluster as shipped, so it loads from any directory
    as_shipped = simulate_deployment_file(A2_EXAMPLE, duration=60.0, calibration="vllm-ascend", rate=1.0)
    made_eager = simulate_deployment_file(eager, duration=60.0, calibration="vllm-ascend", rate=1.0)
    assert made_eager.result["tpot_ms"]["p50"] > 1.1 * as_shipped.result["tpot_ms"]["p50"]
