"""Replaying a recorded arrival trace through a load predictor, window by window, and scoring each design rate
against the rate that arrived over the next window."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascend_pd.autoscale.predictor import RatePredictor
from ascend_pd.errors import InputError

HEADER = "start_s,arrivals"


@dataclass(frozen=True)
class ArrivalTrace:
    """Arrivals counted per fixed bucket: bucket i covers [i * bucket_seconds, (i + 1) * bucket_seconds)."""

    name: str
    bucket_seconds: float
    counts: tuple[int, ...]

    @property
    def span_seconds(self) -> float:
        return self.bucket_seconds * len(self.counts)


def read_arrival_trace(path: str | Path) -> ArrivalTrace:
    """A CSV of `start_s,arrivals` rows after a header, `#` lines being comments (tools/data/arrival_traces)."""
    path = Path(path)
    rows: list[tuple[float, int]] = []
    header_seen = False
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the trace: {exc.strerror}", file=str(path)) from None
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not header_seen:
            if line != HEADER:
                raise InputError(f"the first row must be the header '{HEADER}'", file=str(path), line=number)
            header_seen = True
            continue
        try:
            start, count = line.split(",")
            rows.append((float(start), int(count)))
        except ValueError:
            raise InputError(f"'{line}' is not 'start seconds,arrival count'", file=str(path), line=number) from None
        if rows[-1][1] < 0:
            raise InputError("an arrival count cannot be negative", file=str(path), line=number, field="arrivals")
    if len(rows) < 2:
        raise InputError("the trace needs at least two buckets", file=str(path))
    bucket = rows[1][0] - rows[0][0]
    if bucket <= 0 or any(abs(start - rows[0][0] - i * bucket) > 1e-6 for i, (start, _) in enumerate(rows)):
        raise InputError("bucket starts must rise by one fixed step", file=str(path), field="start_s")
    return ArrivalTrace(path.stem, bucket, tuple(count for _, count in rows))


def window_rates(trace: ArrivalTrace, window: float) -> list[float]:
    """The mean arrival rate (req/s) of each whole observation window of `window` seconds (a trailing part is cut)."""
    per_window = round(window / trace.bucket_seconds)
    if per_window < 1 or abs(per_window * trace.bucket_seconds - window) > 1e-6:
        raise InputError(f"a {window:g} s window does not hold whole {trace.bucket_seconds:g} s buckets of "
                         f"{trace.name}", field="window", fix=f"use a multiple of {trace.bucket_seconds:g} s")
    whole = len(trace.counts) // per_window
    return [sum(trace.counts[i * per_window:(i + 1) * per_window]) / window for i in range(whole)]


def replay(predictor: RatePredictor, rates: list[float], window: float) -> list[tuple[float, float]]:
    """(design rate after window i, rate of window i + 1) for every window that has a next one."""
    pairs = []
    for i, rate in enumerate(rates[:-1]):
        predictor.update((i + 1) * window, rate)
        pairs.append((predictor.design_rate(), rates[i + 1]))
    return pairs


@dataclass(frozen=True)
class ReplayScore:
    windows: int  # windows scored
    misses: int  # windows whose rate came in above the design rate set before them
    mean_overprovision: float  # design rate / rate that came, over windows with arrivals (nan: none had any)
    mean_design_rate: float  # req/s: what the deployment was sized for, on average

    @property
    def miss_share(self) -> float:
        return self.misses / self.windows if self.windows else 0.0


def score(pairs: list[tuple[float, float]]) -> ReplayScore:
    ratios = [design / actual for design, actual in pairs if actual > 0]
    return ReplayScore(windows=len(pairs), misses=sum(actual > design for design, actual in pairs),
                       mean_overprovision=sum(ratios) / len(ratios) if ratios else float("nan"),
                       mean_design_rate=sum(design for design, _ in pairs) / len(pairs) if pairs else 0.0)


def beats(candidate: ReplayScore, baseline: ReplayScore) -> bool:
    """Misses no more often with a lower mean design rate, or less often with at most the baseline's."""
    if candidate.windows != baseline.windows:
        raise ValueError("the two scores must cover the same windows")
    fewer_misses = candidate.misses < baseline.misses
    cheaper = candidate.mean_design_rate < baseline.mean_design_rate
    return ((candidate.misses <= baseline.misses and cheaper)
            or (fewer_misses and candidate.mean_design_rate <= baseline.mean_design_rate))
