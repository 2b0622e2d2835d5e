"""The picture of a profile's validation: every published row's predicted time against the published one, in the fit
and with the row's source left out, coloured by the era of the release it ran. `python -m
ascend_pd.perf.refit_shipped --write` draws it beside the tables of docs/planner.md."""

from __future__ import annotations

from pathlib import Path

from ascend_pd.perf.fitting import Row

ERA_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple")
METRIC_MARKERS = {"tpot": "o", "ttft": "s"}


def write_validation_png(profile: str, rows: list[Row], entries: list[dict], path: Path) -> None:
    """Draw `entries` (validation.yaml's rows of `profile`, one per row of `rows` by label) on log-log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_label = {row.label: row for row in rows}
    fitted = [entry for entry in entries if entry["use"] == "fit"]
    eras = sorted({by_label[entry["label"]].era for entry in fitted})
    fig, ax = plt.subplots(figsize=(7, 5.5), dpi=120)
    for era, colour in zip(eras, ERA_COLOURS):
        for metric, marker in METRIC_MARKERS.items():
            picked = [e for e in fitted if by_label[e["label"]].era == era and e["metric"] == metric]
            if not picked:
                continue
            measured = [e["measured_ms"] for e in picked]
            name = f"{era or 'all'} {metric.upper()}"
            ax.scatter(measured, [e["predicted_ms"] for e in picked], marker=marker, s=22, color=colour,
                       alpha=0.45, label=f"{name}, in the fit")
            held = [(m, m * (1 + e["leave_source_out"])) for m, e in zip(measured, picked)
                    if e.get("leave_source_out") is not None]
            if held:
                ax.scatter(*zip(*held), marker=marker, s=30, facecolors="none", edgecolors=colour,
                           label=f"{name}, its source left out")
    low = min(min(e["measured_ms"], e["predicted_ms"]) for e in fitted) / 1.5
    high = max(max(e["measured_ms"], e["predicted_ms"]) for e in fitted) * 1.5
    for ratio, style in ((1.0, "-"), (1.25, ":"), (0.8, ":")):
        ax.plot([low, high], [low * ratio, high * ratio], color="grey", linestyle=style, linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("published (ms)")
    ax.set_ylabel("predicted (ms)")
    ax.set_title(f"`{profile}` profile: predicted against published, dotted lines at ±25%", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
