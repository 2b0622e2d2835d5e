"""The published measurements of measurements.yaml as fitting rows: what each shipped profile is fitted to and judged
on (`python -m ascend_pd.perf.calibrate` refits the profiles and prints the validation table)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.fitting import FitResult, Row, errors, fit
from ascend_pd.perf.shape import Shape

MEASUREMENTS_FILE = Path(__file__).with_name("measurements.yaml")


@dataclass(frozen=True)
class ProfileRows:
    fit_values: tuple[str, ...]
    fit: tuple[Row, ...]
    holdout: tuple[Row, ...]


def _row(raw: dict) -> Row:
    parallel = raw.get("parallel", {})
    cluster = load_cluster(raw["cluster"])
    return Row(label=raw["label"], model=get_model(raw["model"]), cluster=cluster,
               quantization=raw.get("quantization", "bf16"), kv_dtype=raw.get("kv_dtype", "bf16"),
               metric=raw["metric"], shape=Shape(parallel.get("tp", 1), parallel.get("dp", 1), parallel.get("ep", 1)),
               measured=raw["measured_ms"] / 1e3, batch_per_rank=raw.get("batch_per_rank", 1.0),
               context=raw.get("context", 0.0), prompt=raw.get("prompt", 0.0),
               prompts_in_flight=raw.get("prompts_in_flight", 1.0), mtp=raw.get("mtp", 0),
               mtp_acceptance=raw.get("mtp_acceptance", 0.0))


@cache
def profile_rows(profile: str) -> ProfileRows:
    raw = yaml.safe_load(MEASUREMENTS_FILE.read_text(encoding="utf-8"))[profile]
    rows = [(entry["use"], _row({**raw.get("common", {}), **entry})) for entry in raw["rows"]]
    return ProfileRows(tuple(raw["fit_values"]), tuple(r for use, r in rows if use == "fit"),
                       tuple(r for use, r in rows if use == "holdout"))


def refit(profile: str) -> FitResult:
    """Fit the profile's fitted values to its fit rows, from its stored calibration (chip of the first row)."""
    rows = profile_rows(profile)
    base = load_calibration(profile, rows.fit[0].cluster.chip.id)
    return fit(base, rows.fit, rows.fit_values)


def holdout_errors(profile: str) -> list[tuple[Row, float, float]]:
    """(row, predicted seconds, relative error) of each held-out row under the stored profile."""
    rows = profile_rows(profile)
    return [entry for row in rows.holdout
            for entry in errors(load_calibration(profile, row.cluster.chip.id), [row])]


def mean_abs(values: list[float]) -> float:
    return sum(abs(v) for v in values) / len(values)
