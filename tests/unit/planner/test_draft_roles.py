"""MTP plans give the draft layers to every role (their KV caches must match on P and D), and a draft config on a
prefill instance does not change what the simulator charges for prefill."""

import copy
import json

import pytest
import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.hardware import configs_dir
from ascend_pd.perf.context import cost_model
from ascend_pd.planner.simulator import simulate


def planned(tmp_path, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["plan", "--model", "deepseek-r1", *args, "--out", str(tmp_path),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    return yaml.safe_load((tmp_path / "deployment.yaml").read_text())


def drafts(instance: dict) -> dict | None:
    args = instance.get("vllm", {}).get("extra_args", [])
    return json.loads(args[args.index("--speculative-config") + 1]) if "--speculative-config" in args else None


def test_the_default_deepseek_plan_gives_prefill_and_decode_the_same_draft_layers(tmp_path):
    instances = planned(tmp_path)["instances"]
    roles = {i["role"] for i in instances}
    assert {"prefill", "decode"} <= roles, "the default DeepSeek-R1 plan is expected to disaggregate"
    for instance in instances:
        config = drafts(instance)
        assert config is not None, f"{instance['name']} ({instance['role']}) has no --speculative-config"
        assert config["method"] == "deepseek_mtp"
        if instance["role"] == "prefill":
            # vllm-ascend's PD guide: prefill drafts one token, decode one or more.
            assert config["num_speculative_tokens"] == 1


def test_decode_drafts_as_many_tokens_as_asked_and_prefill_one(tmp_path):
    instances = planned(tmp_path, "--mtp", "2")["instances"]
    wanted = {"prefill": 1, "decode": 2, "colocated": 2}
    assert {i["role"] for i in instances} & {"prefill", "decode"}
    for instance in instances:
        assert drafts(instance)["num_speculative_tokens"] == wanted[instance["role"]], instance["name"]


def test_a_plan_without_mtp_drafts_nowhere(tmp_path):
    assert all(drafts(i) is None for i in planned(tmp_path, "--mtp", "0")["instances"])


def _with_draft_on(deployment, roles: set[str]):
    changed = copy.deepcopy(deployment)
    config = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 1})
    for instance in changed.instances:
        instance.vllm.extra_args = ["--speculative-config", config] if instance.role in roles else []
    return changed


def test_a_draft_config_on_prefill_leaves_simulated_prefill_alone():
    """Prefill still emits one token: its instance is a prefill rank, not a decode rank, and TTFT and goodput are
    those of the same deployment without a draft config on prefill."""
    deployment = load_deployment(configs_dir() / "deployments" / "atlas-800t-a3-x4-deepseek-r1.yaml").deployment
    cost = cost_model("deepseek-r1", "atlas-800t-a3-x4", None, "w8a8")
    workload = Workload(input_tokens=LengthDistribution(mean=3000), output_tokens=LengthDistribution(mean=200),
                        rate=2.0)
    slo = SLO(ttft_ms=3000, tpot_ms=60)
    decode_only = simulate(_with_draft_on(deployment, {"decode"}), cost, workload, slo, duration=60, warmup=10)
    both = simulate(_with_draft_on(deployment, {"prefill", "decode"}), cost, workload, slo, duration=60, warmup=10)
    assert both["completed"] == decode_only["completed"] > 0
    assert both["ttft_ms"] == pytest.approx(decode_only["ttft_ms"])
    assert both["goodput_rps"] == pytest.approx(decode_only["goodput_rps"])
