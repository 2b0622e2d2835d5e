"""How the vllm-ascend profile's validation depends on how its rows are weighed in the fit.

Prints, for each weighting of ascend_pd/perf/fitting.py (every row the same, the shipped choice; every source the
same; or a source's n rows 1/sqrt(n) each), the fitted values and the mean absolute error of TPOT and TTFT rows in the
fit and when each source is left out. Run: `python tools/calibration_weights.py` (about three minutes)."""

from __future__ import annotations

from ascend_pd.perf.fitting import WEIGHTINGS, fit
from ascend_pd.perf.published import prior, profile_rows
from ascend_pd.perf.refit_shipped import METRICS, summary

PROFILE = "vllm-ascend"


def main() -> None:
    rows = profile_rows(PROFILE)
    base = prior(PROFILE, rows.fit[0].cluster.chip.id)
    print("| weighting | metric | rows | in the fit | leaving its source out |\n|---|---|---|---|---|")
    for weighting in WEIGHTINGS:
        result = fit(base, rows.fit, rows.fit_values, by_source=True, weighting=weighting, by_row=False)
        figures_by_metric = summary(result)
        for metric, figures in ((m, figures_by_metric[m]) for m in METRICS if m in figures_by_metric):
            print(f"| {weighting} | {metric.upper()} | {figures['rows']} | {figures['fit']:.1%} "
                  f"| {figures['leave_source_out']:.1%} |")


if __name__ == "__main__":
    main()
