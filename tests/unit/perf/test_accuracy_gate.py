"""The accuracy gate: the vllm-ascend profile, refitted from measurements.yaml with every source left out in turn, may
not be more than GATE_WORSE worse than the figures validation.yaml stores with the data, nor worse than GATE_ERA in
any era of releases. A change to the cost model or the rows that costs accuracy fails here."""

from dataclasses import replace

import pytest
import yaml

from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.fitting import errors
from ascend_pd.perf.published import VALIDATION_FILE, profile_rows, refit
from ascend_pd.perf.refit_shipped import GATE_ERA, GATE_WORSE, gate_failures, summary

# The refit with every source left out (a minute of one core) is computed once per process: the tests that
# read it run in one pytest-xdist worker (make: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("refit")
PROFILE = "vllm-ascend"


@pytest.fixture(scope="module")
def stored() -> dict:
    return yaml.safe_load(VALIDATION_FILE.read_text(encoding="utf-8"))[PROFILE]["summary"]


def test_the_refitted_profile_passes_the_gate(stored):
    current = summary(refit(PROFILE, by_source=True))  # the refit the validation tests share
    assert gate_failures(current, stored) == []
    # the gate has something to judge: both metrics, and every era of releases the rows ran
    assert {"tpot", "ttft"} <= set(current) and set(current["eras"]) == {"2025", "2026"}


def test_a_deliberately_worse_profile_fails_the_gate(stored):
    """The stored profile with each step's scheduling twice as long, judged as the refit is: every fitted row's
    error under it stands in for its leave-source-out error."""
    result = refit(PROFILE, by_source=True)
    worse = [err for row in profile_rows(PROFILE).fit for _, _, err in errors(
        replace(load_calibration(PROFILE, row.cluster.chip.id, row.version),
                step_overhead_s=2 * load_calibration(PROFILE, row.cluster.chip.id, row.version).step_overhead_s
                + 0.01), [row])]
    failures = gate_failures(summary(replace(result, leave_source_out=worse)), stored)
    assert any(f.startswith("TPOT") for f in failures), failures


def test_the_gate_names_what_failed():
    stored = {"tpot": {"leave_source_out": 0.20}, "ttft": {"leave_source_out": 0.10},
              "eras": {"2025": {"tpot": {"rows": 9, "leave_source_out": 0.40}}}}
    current = {"tpot": {"leave_source_out": 0.20 + GATE_WORSE + 0.001}, "ttft": {"leave_source_out": 0.10},
               "eras": {"2026": {"tpot": {"rows": 3, "leave_source_out": GATE_ERA + 0.01}},
                        "2025": {"tpot": {"rows": 9, "leave_source_out": 0.40 + GATE_WORSE / 2}}}}
    failures = gate_failures(current, stored)
    assert len(failures) == 2, failures
    assert failures[0].startswith("TPOT leaving its source out") and "era 2026 TPOT" in failures[1]
    # an era already past the limit may not get worse
    current["eras"]["2025"]["tpot"]["leave_source_out"] = 0.40 + GATE_WORSE + 0.001
    assert "era 2025 TPOT" in gate_failures(current, stored)[-1]
    assert gate_failures(stored, stored) == []
