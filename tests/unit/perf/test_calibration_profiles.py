"""Choosing a calibration: shipped profiles by name, a user's file by path, and clear errors for anything else."""

import json

import pytest
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.perf.calibration import load_calibration, shipped_profiles

DECODE = ["estimate", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--role", "decode", "--tp", "4",
          "--context", "1024", "--batch-per-device", "4", "--format", "json"]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def estimate(*extra: str) -> dict:
    result = run(*DECODE, *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_both_profiles_are_shipped_and_the_default_is_vllm_ascend_the_engine_every_deployment_runs():
    assert {"cloudmatrix-infer", "vllm-ascend"} <= set(shipped_profiles())
    assert estimate()["calibration"] == "vllm-ascend"


def test_a_synchronous_engine_pays_the_per_step_cost_on_every_step_and_an_async_one_hides_it_behind_the_device():
    sync = ("--graph", "full", "--no-async-scheduling")
    papers = estimate("--calibration", "cloudmatrix-infer", *sync)
    stock = estimate("--calibration", "vllm-ascend", *sync)
    profile, paper = load_calibration("vllm-ascend", "910b3"), load_calibration("cloudmatrix-infer", "910b3")
    assert stock["step_ms"] - papers["step_ms"] == pytest.approx(
        (profile.step_overhead_s - paper.step_overhead_s) * 1e3, rel=0.05)
    # with async scheduling the step is the longer of the device's kernels and the host's whole work for it
    schedule = profile.step_overhead_s + 16 * profile.sampling_per_token_s  # 4 sequences per device x TP4
    device = stock["step_ms"] / 1e3 - schedule
    host = 64 * profile.layer_overhead_graph_s + schedule  # Qwen3-32B has 64 layers
    overlapped = estimate("--calibration", "vllm-ascend", "--graph", "full", "--async-scheduling")
    assert overlapped["execution_mode"] == "full + async"
    assert overlapped["step_ms"] == pytest.approx(max(device, host) * 1e3, rel=1e-6)


def test_a_calibration_file_overrides_only_the_values_it_names(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("base: vllm-ascend\nvalues: {step_overhead_s: 0.05}\n")
    mine = load_calibration(str(path), "910b3")
    base = load_calibration("vllm-ascend", "910b3")
    assert mine.step_overhead_s == 0.05 and mine.decode_efficiency == base.decode_efficiency
    assert mine.name == str(path)
    assert estimate("--calibration", str(path))["step_ms"] > estimate("--calibration", "vllm-ascend")["step_ms"]


@pytest.mark.parametrize("content, field", [("values: {decode_eficiency: 0.2}\n", "values.decode_eficiency"),
                                            ("values: {decode_efficiency: fast}\n", "values.decode_efficiency"),
                                            ("base: sglang\nvalues: {}\n", "base"),
                                            ("decode_efficiency: 0.2\n", "values")])
def test_a_bad_calibration_file_is_an_error_naming_the_file_and_field(tmp_path, content, field):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    result = run(*DECODE, "--calibration", str(path))
    assert result.exit_code == 2
    assert str(path) in result.output and f"field '{field}'" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_profile_name_lists_the_shipped_ones():
    result = run(*DECODE, "--calibration", "sglang")
    assert result.exit_code == 2
    assert "cloudmatrix-infer" in result.output and "vllm-ascend" in result.output


def test_plan_writes_the_profile_it_used_into_plan_json_and_the_report(tmp_path):
    out = tmp_path / "plan"
    result = run("plan", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--tpot-ms", "120",
                 "--calibration", "vllm-ascend", "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads((out / "plan.json").read_text())
    assert data["calibration"]["profile"] == "vllm-ascend"
    assert data["calibration"]["values"]["step_overhead_s"] == load_calibration("vllm-ascend", "910b3").step_overhead_s
    assert "`vllm-ascend`" in (out / "report.md").read_text()


# --- eras of host costs -------------------------------------------------------------------------------------------
def test_each_release_falls_in_its_era_of_host_costs():
    import yaml
    from packaging.version import Version

    from ascend_pd.defaults import VLLM_ASCEND_RELEASE
    from ascend_pd.perf.calibration import CALIBRATION_FILE, era_of, load_calibration

    raw = yaml.safe_load(CALIBRATION_FILE.read_text())["profiles"]["vllm-ascend"]
    assert list(raw["eras"]) == sorted(raw["eras"])  # era names sort in time order, as the fit assumes
    assert era_of("vllm-ascend", Version("0.5.0")) == "2025"  # older than the first era: the first
    assert era_of("vllm-ascend", Version("0.13.0rc2")) == "2025"
    assert era_of("vllm-ascend", Version("0.14.0rc1")) == "2026"
    old, new = load_calibration("vllm-ascend", "910c", "0.13.0"), load_calibration("vllm-ascend", "910c")
    assert (old.era, new.era, new.engine_version) == ("2025", "2026", VLLM_ASCEND_RELEASE)
    # a profile without eras prices every release alike
    assert load_calibration("cloudmatrix-infer", "910c", "0.9.1").era == ""


def test_a_value_written_for_an_era_holds_from_that_era_on():
    from ascend_pd.perf.calibration import era_values

    values = {"step_overhead_s": 0.016, "step_overhead_s@2026": 0.010, "request_overhead_s@2027": 0.05,
              "request_overhead_s": 0.3}
    eras = ["2025", "2026", "2027"]
    assert era_values(values, "2025", eras) == {"step_overhead_s": 0.016, "request_overhead_s": 0.3}
    assert era_values(values, "2026", eras) == {"step_overhead_s": 0.010, "request_overhead_s": 0.3}
    assert era_values(values, "2027", eras) == {"step_overhead_s": 0.010, "request_overhead_s": 0.05}
    assert era_values(values, "", []) == {"step_overhead_s": 0.016, "request_overhead_s": 0.3}


def test_a_calibration_file_keeps_the_release_it_prices(tmp_path):
    from ascend_pd.perf.calibration import load_calibration

    path = tmp_path / "mine.yaml"
    path.write_text("base: vllm-ascend\nvalues: {prefill_efficiency: 0.5}\n")
    mine = load_calibration(str(path), "910c", "0.13.0rc1")
    assert (mine.prefill_efficiency, mine.era, mine.engine_version) == (0.5, "2025", "0.13.0rc1")
    assert mine.step_overhead_s == load_calibration("vllm-ascend", "910c", "0.13.0rc1").step_overhead_s
