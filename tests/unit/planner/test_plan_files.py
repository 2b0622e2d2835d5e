"""`ascend-pd plan` writes the five files, and every deployment it writes passes validation with no errors."""

import json

import pytest
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.deploy import validate_file


def plan(tmp_path, *args: str) -> dict:
    result = CliRunner().invoke(cli, ["plan", *args, "--out", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def errors_of(path) -> list:
    _, diagnostics = validate_file(path)
    return [d for d in diagnostics if d.severity == "error"]


def test_default_plan_writes_every_file_and_validates_clean(tmp_path):
    data = plan(tmp_path, "--model", "deepseek-r1")
    for name in ("deployment.yaml", "plan.json", "report.md", "pareto.csv", "pareto.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert errors_of(tmp_path / "deployment.yaml") == []
    assert (tmp_path / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    predicted = data["predicted"]
    assert predicted["goodput_rps"] > 0
    assert predicted["goodput_per_device"] == pytest.approx(predicted["goodput_rps"] / predicted["devices"])
    assert predicted["devices"] <= 768
    assert {"p50", "p90", "p99"} <= set(predicted["ttft_ms"])
    assert predicted["tpot_ms"] <= 50


@pytest.mark.parametrize("model, cluster", [
    ("qwen3-32b", "atlas-800i-a2-x4"),
    ("deepseek-r1", "atlas-800t-a3-x4"),
    ("deepseek-r1", "cloudmatrix384-x2"),
    ("qwen3-30b-a3b", "atlas-800t-a3-x4"),
    ("tiny-llama-gqa", "local-cpu"),
])
def test_plans_on_every_shipped_cluster_validate_clean(tmp_path, model, cluster):
    plan(tmp_path, "--model", model, "--cluster", cluster)
    assert errors_of(tmp_path / "deployment.yaml") == []


def test_plan_json_counts_match_the_instances_of_the_deployment(tmp_path):
    import yaml

    data = plan(tmp_path, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4")
    deployment = yaml.safe_load((tmp_path / "deployment.yaml").read_text())
    for role in ("prefill", "decode", "colocated"):
        instances = [i for i in deployment["instances"] if i["role"] == role]
        expected = data[role]["count"] if data[role] else 0
        assert len(instances) == expected
        for inst in instances:
            assert inst["parallel"]["tp"] == data[role]["parallel"]["tp"]
    used = sum(len(p["devices"]) for i in deployment["instances"] for p in i["devices"])
    assert used == data["predicted"]["devices"]


def test_two_superpods_get_one_serving_group_each_with_its_own_prefill_and_decode(tmp_path):
    import yaml

    from ascend_pd.hardware import load_cluster

    plan(tmp_path, "--model", "deepseek-r1", "--cluster", "cloudmatrix384-x2")
    deployment = yaml.safe_load((tmp_path / "deployment.yaml").read_text())
    pod_of = {n.name: n.superpod for n in load_cluster("cloudmatrix384-x2").nodes}
    roles_per_pod = {}
    for inst in deployment["instances"]:
        pods = {pod_of[p["node"]] for p in inst["devices"]}
        assert len(pods) == 1, f"{inst['name']} spans SuperPoDs {pods}"
        roles_per_pod.setdefault(pods.pop(), set()).add(inst["role"])
    assert len(roles_per_pod) == 2
    for roles in roles_per_pod.values():
        assert roles in ({"prefill", "decode"}, {"colocated"})


def test_target_rate_uses_no_more_devices_than_needed_and_reaches_the_rate(tmp_path):
    data = plan(tmp_path, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "2")
    assert data["predicted"]["max_rate_rps"] >= 2
    full = plan(tmp_path / "full", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4")
    assert data["predicted"]["devices"] < full["predicted"]["devices"]


def test_report_says_which_deployment_kind_won_and_by_how_much(tmp_path):
    # a TPOT target both kinds can meet, so there is a comparison to report
    plan(tmp_path, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--devices", "8", "--tpot-ms", "100")
    report = (tmp_path / "report.md").read_text()
    assert "## Disaggregated or colocated" in report
    assert "more requests per device than the best" in report


def test_target_rate_is_the_rate_written_to_the_deployment_and_predicted_at(tmp_path):
    import yaml

    data = plan(tmp_path, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "3")
    assert data["predicted"]["rate_rps"] == 3
    assert yaml.safe_load((tmp_path / "deployment.yaml").read_text())["workload"]["rate"] == 3
    assert data["predicted"]["goodput_rps"] == pytest.approx(3 * data["predicted"]["slo_attainment"])


def test_an_int8_kv_plan_runs_vllm_ascends_layerwise_connector_and_validates_clean(tmp_path):
    """vllm-ascend gives only decode an int8 (C8) cache; its layerwise connector is the one that quantizes prefill's
    bf16 KV as it writes, and for a GQA model it needs prefill TP a multiple of decode TP."""
    import yaml

    plan(tmp_path, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--kv-dtype", "int8", "--kv-mode",
         "pull", "--rate", "8", "--input-mean", "3000", "--input-p99", "9000", "--output-mean", "300",
         "--output-p99", "900")
    deployment = yaml.safe_load((tmp_path / "deployment.yaml").read_text())
    assert errors_of(tmp_path / "deployment.yaml") == []
    roles = {i["role"] for i in deployment["instances"]}
    assert roles == {"prefill", "decode"}
    assert (deployment["connector"]["implementation"], deployment["connector"]["mode"]) == ("vllm-ascend", "push")
    tps = {role: {i["parallel"]["tp"] for i in deployment["instances"] if i["role"] == role} for role in roles}
    assert all(p % d == 0 for p in tps["prefill"] for d in tps["decode"])


def test_model_path_is_where_the_operator_says_the_weights_are(tmp_path):
    from ascend_pd.deploy import load_deployment

    default = tmp_path / "default"
    plan(default, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "1")
    assert load_deployment(default / "deployment.yaml").deployment.model.path == "/models/qwen3-32b"
    chosen = tmp_path / "chosen"
    plan(chosen, "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "1",
         "--model-path", "/data/weights/Qwen3-32B")
    assert load_deployment(chosen / "deployment.yaml").deployment.model.path == "/data/weights/Qwen3-32B"
    assert errors_of(chosen / "deployment.yaml") == []
