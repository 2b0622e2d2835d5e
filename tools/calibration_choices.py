"""Which values of the vllm-ascend profile to fit, judged on rows left out.

Prints the mean absolute error of TPOT and TTFT rows when each source is left out, over all rows and by era, for
each choice: host costs fitted again for the 2026 era (none, the per-step cost, and more), and values the shipped
profile keeps fixed fitted as well (the host's work per sequence of a step). The shipped choice (measurements.yaml
`fit_values` and `era_values`) is the one this judges best. Run: `python tools/calibration_choices.py` (a few minutes
on one core)."""

from __future__ import annotations

from ascend_pd.perf.calibration import ERA_MARK, profile_eras
from ascend_pd.perf.fitting import fit
from ascend_pd.perf.published import prior, profile_rows
from ascend_pd.perf.refit_shipped import METRICS, summary

PROFILE = "vllm-ascend"
# (values fitted again for each later era, values fitted besides the profile's own)
CHOICES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    ((), ()),
    (("step_overhead_s",), ()),
    (("step_overhead_s", "layer_overhead_graph_s"), ()),
    (("step_overhead_s", "layer_overhead_piecewise_s", "layer_overhead_graph_s", "request_overhead_s"), ()),
    ((), ("sampling_per_token_s",)),
)


def _label(per_era: tuple[str, ...], added: tuple[str, ...]) -> str:
    parts = [f"per era: {', '.join(per_era)}"] if per_era else []
    parts += [f"added: {', '.join(added)}"] if added else []
    return "; ".join(parts) or "none (shipped)"


def main() -> None:
    rows = profile_rows(PROFILE)
    shared = tuple(name for name in rows.fit_values if ERA_MARK not in name)
    later = list(profile_eras(PROFILE))[1:]
    base = prior(PROFILE, rows.fit[0].cluster.chip.id)
    print("| fitted | metric | all rows | " + " | ".join(f"era {era}" for era in profile_eras(PROFILE))
          + " |\n|---|---|---|" + "---|" * len(profile_eras(PROFILE)))
    for per_era, added in CHOICES:
        names = shared + added + tuple(f"{name}{ERA_MARK}{era}" for era in later for name in per_era)
        figures = summary(fit(base, rows.fit, names, by_source=True, by_row=False))
        for metric in METRICS:
            by_era = [figures["eras"].get(era, {}).get(metric, {}).get("leave_source_out")
                      for era in profile_eras(PROFILE)]
            print(f"| {_label(per_era, added)} | {metric.upper()} | {figures[metric]['leave_source_out']:.1%} | "
                  + " | ".join("-" if value is None else f"{value:.1%}" for value in by_era) + " |")


if __name__ == "__main__":
    main()
