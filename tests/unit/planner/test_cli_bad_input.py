"""Bad input to plan, simulate and estimate: one clear message naming the field and fix, exit 2, no traceback."""

import pytest
from click.testing import CliRunner

from ascend_pd.cli.main import cli


@pytest.mark.parametrize("args, words", [
    (["plan", "--model", "no-such-model"], "unknown model"),
    (["plan", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--devices", "1000"], "--devices"),
    (["plan", "--model", "deepseek-r1", "--cluster", "atlas-800i-a2-x4", "--devices", "2"], "does not fit"),
    (["plan", "--model", "qwen3-32b", "--workload", "/nonexistent/w.yaml"], "file not found"),
    (["estimate", "--model", "qwen3-32b", "--chip", "h100", "--role", "decode", "--context", "10"], "unknown chip"),
    (["simulate", "/nonexistent/deployment.yaml"], "file not found"),
])
def test_bad_input_exits_2_with_a_message(args, words):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_a_workload_file_with_an_unknown_key_names_the_key(tmp_path):
    bad = tmp_path / "w.yaml"
    bad.write_text("workload:\n  input_tokens: {mean: 100}\n  output_tokens: {mean: 10}\n  rate: 1\n  burst: 3\n")
    result = CliRunner().invoke(cli, ["plan", "--model", "qwen3-32b", "--workload", str(bad)])
    assert result.exit_code == 2
    assert "workload.burst" in result.output and "w.yaml:5" in result.output


def test_simulate_without_a_workload_anywhere_asks_for_one(tmp_path):
    import yaml

    from ascend_pd.hardware import configs_dir

    data = yaml.safe_load((configs_dir() / "deployments" / "atlas-800i-a2-x4-qwen3-32b.yaml").read_text())
    del data["workload"]
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "workload" in result.output and "fix:" in result.output


def test_simulate_refuses_a_deployment_that_fails_validation(tmp_path):
    import yaml

    from ascend_pd.hardware import configs_dir

    data = yaml.safe_load((configs_dir() / "deployments" / "atlas-800i-a2-x4-qwen3-32b.yaml").read_text())
    data["instances"] = [i for i in data["instances"] if i["role"] == "prefill"]  # no decode instance left
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(cli, ["simulate", str(path)])
    assert result.exit_code == 2
    assert "APD301" in result.output and "ascend-pd validate" in result.output
