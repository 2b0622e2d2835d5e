"""Refit the shipped calibration profiles to their published measurements and print the validation tables.

Run `python -m ascend_pd.perf.refit_shipped [PROFILE ...]` to print them; with `--write`, also write validation.yaml,
the tables of docs/planner.md (between its calibration-tables markers) and the picture of each profile's rows
(docs/validation-<profile>.png). Copy the fitted values into
calibration.yaml when the model or the rows change. Every row of measurements.yaml is printed: fitted rows with their
residual, their error when fitted without them (leave-one-out) and without their whole source (leave-source-out),
held-out rows with their error under the stored profile, and recorded rows, which are neither fitted nor judged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import yaml

from ascend_pd.perf.calibration import shipped_profiles
from ascend_pd.perf.fitting import FitResult, Row
from ascend_pd.perf.published import VALIDATION_FILE, holdout_errors, mean_abs, profile_rows, refit, stored_errors
from ascend_pd.perf.validation_plot import write_validation_png

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
DOCS_FILE = DOCS_DIR / "planner.md"
BEGIN, END = "<!-- calibration-tables:begin -->", "<!-- calibration-tables:end -->"
METRICS = ("tpot", "ttft")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _entry(use: str, row: Row, predicted: float, err: float, **held_out: float | None) -> dict:
    """One row of validation.yaml: the row, the stored or fitted prediction, and any held-out errors."""
    return {"label": row.label, "source": row.source, "metric": row.metric, "use": use,
            "measured_ms": round(row.measured * 1e3, 2), "predicted_ms": round(predicted * 1e3, 2),
            "error": round(err, 4), **{k: None if v is None else round(v, 4) for k, v in held_out.items()}}


# The accuracy gate (tests/unit/perf/test_accuracy_gate.py): a change to the model or the rows may not make the mean
# leave-source-out error of a metric more than GATE_WORSE worse than validation.yaml states, nor any era's more
# than GATE_ERA (an era already past it: more than GATE_WORSE worse than stored).
GATE_WORSE = 0.02
GATE_ERA = 0.25


def _groups(result: FitResult, key: Callable[[Row], str]) -> dict[str, dict[str, dict]]:
    """Per group of rows (`key` of a row) and metric: rows and their mean leave-source-out error."""
    groups: dict[str, dict[str, dict]] = {}
    for (row, _, _), held in zip(result.residuals, result.leave_source_out):
        if held is not None:
            groups.setdefault(key(row), {}).setdefault(row.metric, []).append(held)
    return {name: {metric: {"rows": len(errs), "leave_source_out": round(mean_abs(errs), 4)}
                   for metric, errs in sorted(metrics.items())} for name, metrics in sorted(groups.items())}


def summary(result: FitResult) -> dict[str, dict]:
    """Per metric: rows, sources and models fitted, and the mean absolute error in the fit, leaving one row out and
    leaving its source out; and the leave-source-out error by era and by graph mode."""
    figures: dict[str, dict] = {}
    for metric in METRICS:
        picked = [i for i, (row, _, _) in enumerate(result.residuals) if row.metric == metric]
        if not picked:
            continue
        rows = [result.residuals[i][0] for i in picked]
        entry = {"rows": len(picked), "sources": len({r.source for r in rows}),
                 "models": len({r.model.id for r in rows}),
                 "fit": round(mean_abs([result.residuals[i][2] for i in picked]), 4)}
        for key, errors in (("leave_one_out", result.leave_one_out), ("leave_source_out", result.leave_source_out)):
            values = [errors[i] for i in picked if errors[i] is not None]
            if values:
                entry[key] = round(mean_abs(values), 4)
        figures[metric] = entry
    if any(row.era for row, _, _ in result.residuals):
        figures["eras"] = _groups(result, lambda row: row.era)
    figures["modes"] = _groups(result, lambda row: row.mode.label())
    return figures


def gate_failures(current: dict, stored: dict) -> list[str]:
    """What fails the accuracy gate in `current` (a summary) against `stored` (validation.yaml's)."""
    failures = []
    for metric in METRICS:
        now, then = (s.get(metric, {}).get("leave_source_out") for s in (current, stored))
        if now is not None and then is not None and now > then + GATE_WORSE:
            failures.append(f"{metric.upper()} leaving its source out: {now:.1%}, stored {then:.1%}")
    for era, metrics in current.get("eras", {}).items():
        for metric, figures in metrics.items():
            then = stored.get("eras", {}).get(era, {}).get(metric, {}).get("leave_source_out")
            limit = GATE_ERA if then is None else max(GATE_ERA, then + GATE_WORSE)
            if figures["leave_source_out"] > limit:
                failures.append(f"era {era} {metric.upper()} leaving its source out: "
                                f"{figures['leave_source_out']:.1%}, more than {limit:.1%}")
    return failures


def validation(profile: str) -> dict:
    """What validation.yaml holds for `profile`: the fitted values, every row's errors and their summary."""
    result = refit(profile, by_source=True)
    rows = profile_rows(profile)
    judged = [_entry("fit", row, predicted, err, leave_one_out=loo, leave_source_out=loso)
              for (row, predicted, err), loo, loso in zip(result.residuals, result.leave_one_out,
                                                          result.leave_source_out)]
    judged += [_entry(use, *stored) for use, picked in (("holdout", rows.holdout), ("recorded", rows.recorded))
               for stored in stored_errors(profile, picked)]
    return {"values": {k: float(f"{v:.4g}") for k, v in result.values.items()}, "at_bounds": result.at_bounds,
            "summary": summary(result), "rows": judged}


def report(profile: str) -> list[str]:
    data = validation(profile)
    rows = profile_rows(profile)
    every = {row.label: row for row in rows.fit + rows.holdout + rows.recorded}
    lines = [f"### `{profile}` rows", "", "fitted: " + ", ".join(f"{k} = {v:.4g}" for k, v in data["values"].items())]
    if data["at_bounds"]:
        lines.append(f"(on a bound of its range: {', '.join(data['at_bounds'])})")
    lines += ["", "| row | source | vllm-ascend | metric | mode | use | published | predicted | error | leave-one-out "
              "| leave-source-out |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for entry in data["rows"]:
        row = every[entry["label"]]
        release = f"{row.version} ({row.era})" if row.era else row.version or "-"
        lines.append(f"| {row.label} | {row.source or '-'} | {release} | {row.metric.upper()} | {row.mode.label()} "
                     f"| {entry['use'].replace('holdout', 'held out')} | {entry['measured_ms']:.1f} ms "
                     f"| {entry['predicted_ms']:.1f} ms | {_pct(entry['error'])} | {_pct(entry.get('leave_one_out'))} "
                     f"| {_pct(entry.get('leave_source_out'))} |")
    lines.append("")
    for metric, figures in ((m, f) for m, f in data["summary"].items() if m in METRICS):
        parts = [f"in the fit {figures['fit']:.1%}"]
        if "leave_one_out" in figures:
            parts.append(f"leaving one row out {figures['leave_one_out']:.1%}")
        if "leave_source_out" in figures:
            parts.append(f"leaving its source out {figures['leave_source_out']:.1%}")
        lines.append(f"- {metric.upper()}, {figures['rows']} fitted rows from {figures['sources']} source(s) and "
                     f"{figures['models']} model(s), mean absolute error: " + ", ".join(parts))
    for kind in ("eras", "modes"):
        for name, metrics in data["summary"].get(kind, {}).items():
            lines.append(f"- {kind[:-1]} {name}, leaving its source out: " + ", ".join(
                f"{metric.upper()} {figures['leave_source_out']:.1%} over {figures['rows']} rows"
                for metric, figures in metrics.items()))
    held = holdout_errors(profile)
    if held:
        lines.append(f"- held-out rows, mean absolute error under the stored profile: "
                     f"{mean_abs([e for _, _, e in held]):.1%} over {len(held)} rows")
    if profile_rows(profile).fit[0].era:
        lines += ["", f"![`{profile}`: predicted against published]({plot_path(profile).name})"]
    if rows.sources:
        lines += ["", "Sources:", ""] + [f"- {key}: {text}" for key, text in rows.sources.items()]
    return lines + [""]


def tables(profiles: list[str]) -> str:
    return "\n".join(line for name in profiles for line in report(name))


def plot_path(profile: str) -> Path:
    return DOCS_DIR / f"validation-{profile}.png"


def write(profiles: list[str]) -> None:
    data = {name: validation(name) for name in profiles}
    for name in profiles:
        rows = profile_rows(name)
        if rows.fit[0].era:
            write_validation_png(name, list(rows.fit), data[name]["rows"], plot_path(name))
    VALIDATION_FILE.write_text("# Written by `python -m ascend_pd.perf.refit_shipped --write`: every published row's "
                               "errors, and what the plan report quotes.\n"
                               + yaml.safe_dump(data, sort_keys=False),
                               encoding="utf-8")
    text = DOCS_FILE.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS_FILE.write_text(f"{head}{BEGIN}\n{tables(profiles)}\n{END}{tail}", encoding="utf-8")


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--write"]
    chosen = arguments or shipped_profiles()
    if "--write" in sys.argv[1:]:
        write(shipped_profiles())
    print(tables(chosen))
