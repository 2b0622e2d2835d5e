"""Refit the shipped calibration profiles to their published measurements and print the validation table.

Run `python -m ascend_pd.perf.calibrate [PROFILE ...]`; copy the printed values into calibration.yaml when the model
changes. Every row of measurements.yaml is printed: fitted rows with their residual and leave-one-out error, held-out
rows with their error under the stored profile.
"""

from __future__ import annotations

import sys

from ascend_pd.perf.calibration import shipped_profiles
from ascend_pd.perf.published import holdout_errors, mean_abs, refit


def report(profile: str) -> list[str]:
    result = refit(profile)
    lines = [f"## {profile}", "", "fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in result.values.items()), "",
             "| row | metric | use | published | predicted | error | leave-one-out |", "|---|---|---|---|---|---|---|"]
    for (row, predicted, err), loo in zip(result.residuals, result.leave_one_out):
        out = "-" if loo is None else f"{loo:+.1%}"
        lines.append(f"| {row.label} | {row.metric.upper()} | fit | {row.measured * 1e3:.1f} ms "
                     f"| {predicted * 1e3:.1f} ms | {err:+.1%} | {out} |")
    held = holdout_errors(profile)
    for row, predicted, err in held:
        lines.append(f"| {row.label} | {row.metric.upper()} | held out | {row.measured * 1e3:.1f} ms "
                     f"| {predicted * 1e3:.1f} ms | {err:+.1%} | - |")
    if held:
        lines += ["", f"held-out mean absolute error: {mean_abs([e for _, _, e in held]):.1%} over {len(held)} rows"]
    return lines + [""]


if __name__ == "__main__":
    for name in sys.argv[1:] or shipped_profiles():
        print("\n".join(report(name)))
