"""Which host costs of the vllm-ascend profile to fit once per era of releases, judged on rows left out.

Prints, for each choice of values fitted again for the 2026 era (none, the per-step cost, and more), the mean
absolute error of TPOT and TTFT rows when each source is left out, over all rows and by era. The shipped choice
(measurements.yaml `era_values`) is the one this judges best. Run: `python tools/calibration_eras.py` (about ten
minutes on one core)."""

from __future__ import annotations

from ascend_pd.perf.calibration import ERA_MARK, profile_eras
from ascend_pd.perf.fitting import fit
from ascend_pd.perf.published import prior, profile_rows
from ascend_pd.perf.refit_shipped import METRICS, summary

PROFILE = "vllm-ascend"
CHOICES = ((), ("step_overhead_s",), ("step_overhead_s", "layer_overhead_graph_s"),
           ("step_overhead_s", "layer_overhead_piecewise_s", "layer_overhead_graph_s", "request_overhead_s"))


def main() -> None:
    rows = profile_rows(PROFILE)
    shared = tuple(name for name in rows.fit_values if ERA_MARK not in name)
    later = list(profile_eras(PROFILE))[1:]
    base = prior(PROFILE, rows.fit[0].cluster.chip.id)
    print("| fitted per era | metric | all rows | " + " | ".join(f"era {era}" for era in profile_eras(PROFILE))
          + " |\n|---|---|---|" + "---|" * len(profile_eras(PROFILE)))
    for choice in CHOICES:
        names = shared + tuple(f"{name}{ERA_MARK}{era}" for era in later for name in choice)
        figures = summary(fit(base, rows.fit, names, by_source=True, by_row=False))
        for metric in METRICS:
            by_era = [figures["eras"].get(era, {}).get(metric, {}).get("leave_source_out")
                      for era in profile_eras(PROFILE)]
            print(f"| {', '.join(choice) or 'none'} | {metric.upper()} | {figures[metric]['leave_source_out']:.1%} | "
                  + " | ".join("-" if value is None else f"{value:.1%}" for value in by_era) + " |")


if __name__ == "__main__":
    main()
