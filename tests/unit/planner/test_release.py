"""A deployment carries the vllm-ascend release it was planned for (`vllm_ascend_version`): plan writes the release
it priced, and whatever prices the deployment later (simulate, calibrate, the autoscaler's re-plan) reads it, so a
plan and the checks made on it never price two releases. What tells the two releases here apart: vLLM schedules
asynchronously by default from the release vllm-ascend v0.14.0rc1 is built on (perf/engine_version.py), and the plan's
engines do not set it."""

from __future__ import annotations

import pytest
import yaml

from ascend_pd.deploy import load_deployment
from ascend_pd.planner.deployment_simulation import simulate_deployment_file
from ascend_pd.planner.fit_to_bench import BenchResult, bench_rows
from ascend_pd.planner.replan import cost_model
from tests.cli_runner import run_cli

OLD, NEW = "0.13.0", "0.25.1rc1"  # either side of v0.14.0rc1
PLAN = ["plan", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--rate", "2"]


@pytest.fixture(scope="module")
def planned_old(tmp_path_factory):
    """A plan priced for the older release, as `ascend-pd plan --vllm-ascend-version` writes it."""
    out = tmp_path_factory.mktemp("plan")
    result = run_cli(*PLAN, "--vllm-ascend-version", f"v{OLD}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out / "deployment.yaml"


def with_release(path, release: str | None, tmp_path):
    data = yaml.safe_load(path.read_text())
    data.pop("vllm_ascend_version")
    if release is not None:
        data["vllm_ascend_version"] = release
    out = tmp_path / f"deployment-{release}.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def test_plan_writes_the_release_it_priced_and_names_it_in_the_report(planned_old):
    assert yaml.safe_load(planned_old.read_text())["vllm_ascend_version"] == OLD  # normalised: no leading v
    assert f"vllm-ascend {OLD}" in (planned_old.parent / "report.md").read_text()


def test_plan_without_the_flag_writes_the_pinned_release(tmp_path):
    assert run_cli(*PLAN, "--out", str(tmp_path)).returncode == 0
    assert yaml.safe_load((tmp_path / "deployment.yaml").read_text())["vllm_ascend_version"] == NEW


def tpot_p50(path, **flags) -> float:
    return simulate_deployment_file(path, duration=40.0, **flags).result["tpot_ms"]["p50"]


def test_simulate_prices_the_release_the_deployment_names_unless_the_flag_says_otherwise(planned_old, tmp_path):
    old = tpot_p50(planned_old)
    new = tpot_p50(with_release(planned_old, NEW, tmp_path))
    assert new < old * 0.9  # the host's scheduling hidden behind the device's step, against added to it
    assert tpot_p50(planned_old, vllm_ascend_version=NEW) == new  # the flag wins
    assert tpot_p50(with_release(planned_old, None, tmp_path)) == new  # none named: the pinned release


def test_the_autoscalers_replan_prices_the_release_the_deployment_runs(planned_old, tmp_path):
    assert cost_model(load_deployment(planned_old)).cal.engine_version == OLD
    assert cost_model(load_deployment(with_release(planned_old, None, tmp_path))).cal.engine_version == NEW


def test_calibrate_reads_measurements_in_the_mode_of_the_deployments_release(planned_old):
    result = BenchResult("c1.json", completed=10, mean_input=1000, mean_output=300, mean_ttft=0.3, mean_tpot=0.04,
                         request_throughput=1.0, output_throughput=30.0)
    assert {r.mode.async_scheduling for r in bench_rows(planned_old, [result])} == {False}
    assert {r.mode.async_scheduling for r in bench_rows(planned_old, [result], version=NEW)} == {True}


def test_a_release_that_is_not_one_names_the_field(planned_old, tmp_path):
    bad = with_release(planned_old, "latest", tmp_path)
    result = run_cli("validate", str(bad))
    assert result.returncode == 2
    assert "vllm_ascend_version" in result.stderr and "'latest' is not a vllm-ascend release" in result.stderr
