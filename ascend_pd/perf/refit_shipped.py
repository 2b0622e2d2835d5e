"""Refit the shipped calibration profiles to their published measurements and print the validation tables.

Run `python -m ascend_pd.perf.refit_shipped [PROFILE ...]` to print them; with `--write`, also write validation.yaml
and the tables of docs/planner.md (between its calibration-tables markers). Copy the fitted values into
calibration.yaml when the model or the rows change. Every row of measurements.yaml is printed: fitted rows with their
residual, their error when fitted without them (leave-one-out) and without their whole source (leave-source-out),
held-out rows with their error under the stored profile, and recorded rows, which are neither fitted nor judged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ascend_pd.perf.calibration import shipped_profiles
from ascend_pd.perf.fitting import FitResult, Row
from ascend_pd.perf.published import VALIDATION_FILE, holdout_errors, mean_abs, profile_rows, refit, stored_errors

DOCS_FILE = Path(__file__).resolve().parents[2] / "docs" / "planner.md"
BEGIN, END = "<!-- calibration-tables:begin -->", "<!-- calibration-tables:end -->"
METRICS = ("tpot", "ttft")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _entry(use: str, row: Row, predicted: float, err: float, **held_out: float | None) -> dict:
    """One row of validation.yaml: the row, the stored or fitted prediction, and any held-out errors."""
    return {"label": row.label, "source": row.source, "metric": row.metric, "use": use,
            "measured_ms": round(row.measured * 1e3, 2), "predicted_ms": round(predicted * 1e3, 2),
            "error": round(err, 4), **{k: None if v is None else round(v, 4) for k, v in held_out.items()}}


def summary(result: FitResult) -> dict[str, dict]:
    """Per metric: rows, sources and models fitted, and the mean absolute error in the fit, leaving one row out and
    leaving its source out."""
    figures = {}
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
    return figures


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
    lines += ["", "| row | source | metric | mode | use | published | predicted | error | leave-one-out "
              "| leave-source-out |", "|---|---|---|---|---|---|---|---|---|---|"]
    for entry in data["rows"]:
        row = every[entry["label"]]
        lines.append(f"| {row.label} | {row.source or '-'} | {row.metric.upper()} | {row.mode.label()} "
                     f"| {entry['use'].replace('holdout', 'held out')} | {entry['measured_ms']:.1f} ms "
                     f"| {entry['predicted_ms']:.1f} ms | {_pct(entry['error'])} | {_pct(entry.get('leave_one_out'))} "
                     f"| {_pct(entry.get('leave_source_out'))} |")
    lines.append("")
    for metric, figures in data["summary"].items():
        parts = [f"in the fit {figures['fit']:.1%}"]
        if "leave_one_out" in figures:
            parts.append(f"leaving one row out {figures['leave_one_out']:.1%}")
        if "leave_source_out" in figures:
            parts.append(f"leaving its source out {figures['leave_source_out']:.1%}")
        lines.append(f"- {metric.upper()}, {figures['rows']} fitted rows from {figures['sources']} source(s) and "
                     f"{figures['models']} model(s), mean absolute error: " + ", ".join(parts))
    held = holdout_errors(profile)
    if held:
        lines.append(f"- held-out rows, mean absolute error under the stored profile: "
                     f"{mean_abs([e for _, _, e in held]):.1%} over {len(held)} rows")
    if rows.sources:
        lines += ["", "Sources:", ""] + [f"- {key}: {text}" for key, text in rows.sources.items()]
    return lines + [""]


def tables(profiles: list[str]) -> str:
    return "\n".join(line for name in profiles for line in report(name))


def write(profiles: list[str]) -> None:
    VALIDATION_FILE.write_text("# Written by `python -m ascend_pd.perf.refit_shipped --write`: every published row's "
                               "errors, and what the plan report quotes.\n"
                               + yaml.safe_dump({name: validation(name) for name in profiles}, sort_keys=False),
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
