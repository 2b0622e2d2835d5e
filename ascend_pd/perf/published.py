"""The published measurements of measurements.yaml as fitting rows: what each shipped profile is fitted to and judged
on, and the validation every row got (validation.yaml, which `python -m ascend_pd.perf.refit_shipped --write` refits
and writes with the tables of docs/planner.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ascend_pd.hardware import load_cluster
from ascend_pd.models import ModelSpec, get_model
from ascend_pd.perf.calibration import ERA_MARK, PAPER_PROFILE, Calibration, era_of, load_calibration, profile_eras
from ascend_pd.perf.engine_version import engine_version
from ascend_pd.perf.exec_mode import ExecMode
from ascend_pd.perf.fitting import FitResult, Row, errors, fit
from ascend_pd.perf.shape import Shape

MEASUREMENTS_FILE = Path(__file__).with_name("measurements.yaml")
VALIDATION_FILE = Path(__file__).with_name("validation.yaml")
USES = ("fit", "holdout", "recorded")


@dataclass(frozen=True)
class ProfileRows:
    fit_values: tuple[str, ...]  # plain names, and `name@era` for each later era of the values fitted per era
    fit: tuple[Row, ...]
    holdout: tuple[Row, ...]  # judged under the stored profile, never fitted
    recorded: tuple[Row, ...]  # gathered but neither fitted nor judged; measurements.yaml says why
    sources: dict[str, str]  # id -> the document, its commit and the versions it states


def _row(raw: dict, profile: str) -> Row:
    parallel = raw.get("parallel", {})
    version = str(raw.get("version", ""))
    cluster = load_cluster(raw["cluster"])
    mode = raw.get("mode", {})
    return Row(label=raw["label"], model=get_model(raw["model"]), cluster=cluster,
               quantization=raw.get("quantization", "bf16"), kv_dtype=raw.get("kv_dtype", "bf16"),
               metric=raw["metric"], shape=Shape(parallel.get("tp", 1), parallel.get("dp", 1), parallel.get("ep", 1)),
               measured=raw["measured_ms"] / 1e3, batch_per_rank=raw.get("batch_per_rank", 1.0),
               context=raw.get("context", 0.0), prompt=raw.get("prompt", 0.0),
               prompts_in_flight=raw.get("prompts_in_flight", 1.0), mtp=raw.get("mtp", 0),
               mtp_acceptance=raw.get("mtp_acceptance", 0.0), source=raw.get("source", ""),
               mode=ExecMode(mode.get("graph", "full"), mode.get("async", False)),
               step_tokens=raw.get("step_tokens", 0.0), version=version,
               era=era_of(profile, engine_version(version, f"measurements.yaml: {raw['label']}")) if version else "")


@cache
def profile_rows(profile: str) -> ProfileRows:
    raw = yaml.safe_load(MEASUREMENTS_FILE.read_text(encoding="utf-8"))[profile]
    rows = [(entry["use"], _row({**raw.get("common", {}), **entry}, profile)) for entry in raw["rows"]]
    unknown = {use for use, _ in rows} - set(USES)
    assert not unknown, f"measurements.yaml {profile}: unknown use {unknown}"
    by_use = {use: tuple(row for u, row in rows if u == use) for use in USES}
    per_era = raw.get("era_values", [])
    later_eras = list(profile_eras(profile))[1:]
    names = (*raw["fit_values"], *(f"{name}{ERA_MARK}{era}" for era in later_eras for name in per_era))
    return ProfileRows(names, by_use["fit"], by_use["holdout"], by_use["recorded"], dict(raw.get("sources", {})))


def prior(profile: str, chip_id: str) -> Calibration:
    """Where every fit of `profile` starts, whole or with rows left out: its stored calibration with the values it
    fits set back to the paper's profile's, so no rows it is judged on chose the start."""
    names = {name.split(ERA_MARK)[0] for name in profile_rows(profile).fit_values}
    paper = load_calibration(PAPER_PROFILE, chip_id)
    return load_calibration(profile, chip_id).with_values(**{name: getattr(paper, name) for name in names})


@cache
def refit(profile: str, by_source: bool = False) -> FitResult:
    """Fit the profile's values to its fit rows (chip of the first row); with `by_source`, also leave each source
    out in turn."""
    rows = profile_rows(profile)
    return fit(prior(profile, rows.fit[0].cluster.chip.id), rows.fit, rows.fit_values, by_source)


def stored_errors(profile: str, rows: tuple[Row, ...]) -> list[tuple[Row, float, float]]:
    """(row, predicted seconds, relative error) of each of `rows` under the stored profile, at the release each ran
    (or the pinned one, for a row that states none)."""
    return [entry for row in rows
            for entry in errors(load_calibration(profile, row.cluster.chip.id, row.version or None), [row])]


def holdout_errors(profile: str) -> list[tuple[Row, float, float]]:
    return stored_errors(profile, profile_rows(profile).holdout)


def mean_abs(values: list[float]) -> float:
    return sum(abs(v) for v in values) / len(values)


# --- the rows nearest a deployment --------------------------------------------------------------------------------
@dataclass(frozen=True)
class NearRow:
    label: str
    source: str
    metric: str
    error: float | None  # the row's error on a fit without its source (or, held out, under the stored profile)
    distance: float


def _kind(model: ModelSpec) -> str:
    return "MLA" if model.mla else "MoE" if model.moe else "dense"


def _distance(row: Row, model: ModelSpec, chip_id: str, quantization: str, shape: Shape, mode: ExecMode) -> float:
    """How unlike the row is to the deployment: another model of its kind (dense, MoE, MLA) counts 1, another kind 2;
    another chip, graph mode, or quantization a half; async scheduling or a TP twice or half as wide a quarter."""
    distance = 0.0 if row.model.id == model.id else 1.0 if _kind(row.model) == _kind(model) else 2.0
    distance += 0.5 * (row.cluster.chip.id != chip_id) + 0.5 * (row.quantization != quantization)
    distance += 0.5 * (row.mode.decode_graph != mode.decode_graph)
    distance += 0.25 * (row.mode.async_scheduling != mode.async_scheduling)
    return distance + 0.25 * abs(math.log2(row.shape.tp / shape.tp))


@cache
def _validation() -> dict:
    return yaml.safe_load(VALIDATION_FILE.read_text(encoding="utf-8"))


def nearest_rows(profile: str, metric: str, model: ModelSpec, chip_id: str, quantization: str, shape: Shape,
                 mode: ExecMode, count: int = 3) -> list[NearRow]:
    """The `count` published `metric` rows of `profile` most like a deployment of `model` in `shape` and `mode`,
    with the error the profile made on each when it had not seen its source: how far to trust the profile there."""
    if profile not in _validation():
        return []
    judged = {entry["label"]: entry for entry in _validation()[profile]["rows"]}
    rows = profile_rows(profile)
    near = []
    for row in (r for r in rows.fit + rows.holdout if r.metric == metric):
        entry = judged.get(row.label, {})
        error = entry.get("leave_source_out", entry.get("error") if entry.get("use") == "holdout" else None)
        near.append(NearRow(row.label, row.source, row.metric, error,
                            _distance(row, model, chip_id, quantization, shape, mode)))
    return sorted(near, key=lambda r: (r.distance, r.label))[:count]
