"""`plan --connector --kv-mode` writes the connector asked for, pairs only shapes it serves, and the report says what
it needs and which calibration profile priced the plan."""

import json

import pytest
import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.deploy import validate_file

A2 = ["--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "4"]


def run(*args: str):
    return CliRunner().invoke(cli, ["plan", *args])


def plan(tmp_path, *args: str) -> tuple[dict, str]:
    result = run(*args, "--out", str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    return yaml.safe_load((tmp_path / "deployment.yaml").read_text()), (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("connector, mode", [("vllm-ascend", "pull"), ("vllm-ascend", "push"),
                                             ("ascend-pd", "pull"), ("ascend-pd", "push")])
def test_the_connector_and_mode_asked_for_are_written_and_validate_clean(tmp_path, connector, mode):
    data, _ = plan(tmp_path, *A2, "--connector", connector, "--kv-mode", mode)
    assert data["connector"]["implementation"] == connector and data["connector"]["mode"] == mode
    _, diagnostics = validate_file(tmp_path / "deployment.yaml")
    assert [d for d in diagnostics if d.severity == "error"] == []


def test_vllm_ascends_pull_connector_gets_prefill_tp_at_least_decode_tp(tmp_path):
    # DeepSeek-R1 on A3: ascend-pd's own plan pairs P TP16 with D TP2 or TP1, vllm-ascend's pull needs P TP >= D TP
    data, _ = plan(tmp_path, "--model", "deepseek-r1", "--cluster", "atlas-800t-a3-x4", "--rate", "2",
                   "--connector", "vllm-ascend", "--kv-mode", "pull")
    tp = {i["role"]: i["parallel"]["tp"] for i in data["instances"]}
    assert tp["prefill"] >= tp["decode"] and tp["prefill"] % tp["decode"] == 0


def test_the_report_says_push_needs_cann_8_5_rc1_and_pull_does_not(tmp_path):
    _, push = plan(tmp_path / "push", *A2, "--connector", "ascend-pd", "--kv-mode", "push")
    _, pull = plan(tmp_path / "pull", *A2, "--connector", "ascend-pd", "--kv-mode", "pull")
    # vllm-ascend's layerwise connector: an event wait under ADXL "may occasionally hang" before CANN 8.5.RC1
    assert "CANN 8.5.RC1 or later" in push
    assert "8.5.RC1" not in pull and "CANN 8.3.RC1 or later" in pull
    assert "AscendPDConnector" in push


def test_the_report_names_vllm_ascends_own_connector(tmp_path):
    _, report = plan(tmp_path, *A2, "--connector", "vllm-ascend", "--kv-mode", "push")
    assert "MooncakeLayerwiseConnector" in report


def test_a_cpu_plan_needs_no_cann(tmp_path):
    _, report = plan(tmp_path, "--model", "tiny-llama-gqa", "--cluster", "local-cpu", "--devices", "2",
                     "--input-mean", "128", "--input-dist", "fixed", "--output-mean", "32", "--output-dist", "fixed",
                     "--tpot-ms", "500", "--ttft-ms", "5000")
    assert "CANN" not in report.split("## Connector")[1].split("##")[0]


def test_vllm_ascends_connector_on_a_cpu_cluster_is_refused_naming_the_flag():
    result = run("--model", "tiny-llama-gqa", "--cluster", "local-cpu", "--connector", "vllm-ascend")
    assert result.exit_code == 2
    assert "--connector" in result.output and "use --connector ascend-pd" in result.output


def test_an_int8_kv_cache_with_the_ascend_pd_connector_is_refused_naming_the_fix():
    result = run(*A2, "--kv-dtype", "int8", "--connector", "ascend-pd")
    assert result.exit_code == 2
    assert "--connector vllm-ascend --kv-mode push" in result.output


def test_the_report_says_the_default_profile_priced_it_and_why(tmp_path):
    _, report = plan(tmp_path, *A2)
    assert "Priced with the `vllm-ascend` calibration profile, the default" in report
    assert "the engine every rendered deployment runs" in report


def test_the_report_says_an_explicit_profile_was_chosen_and_what_it_prices(tmp_path):
    _, report = plan(tmp_path, *A2, "--tpot-ms", "60", "--calibration", "cloudmatrix-infer")
    assert "Priced with the `cloudmatrix-infer` calibration profile, chosen with --calibration" in report
    assert "CloudMatrix-Infer" in report and "fall short" in report


def test_plan_json_carries_the_connector_it_wrote(tmp_path):
    result = run(*A2, "--connector", "vllm-ascend", "--kv-mode", "pull", "--format", "json")
    assert json.loads(result.output)["connector"] == {"implementation": "vllm-ascend", "mode": "pull",
                                                      "protocol": "ascend"}
