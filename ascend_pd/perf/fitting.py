"""Fitting calibration values to measured serving figures, with the residual of every row and its error when fitted
without it (leave-one-row-out) or without its whole source (leave-one-source-out).

A row is one measured operating point: decode TPOT at a known batch per DP rank and context, or prefill TTFT of a
known prompt at low load or of a burst of prompts. The fit minimises the squared log-ratio of predicted to measured
over the rows, each row weighing the same (WEIGHTING), inside each value's bounds.

Rows may carry the era of the engine release they ran (calibration.py): a value named `name@era` is fitted to the
rows of that era and later, the plain `name` to the older ones. A fit leaves out the values its rows do not read (an
era without eager rows keeps the earlier era's eager cost).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping, Sequence

import numpy as np

from ascend_pd.hardware import Cluster, LinkTier
from ascend_pd.models import ModelSpec
from ascend_pd.perf.calibration import ERA_MARK, VALUE_FIELDS, Calibration, era_values
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.exec_mode import ExecMode
from ascend_pd.perf.shape import Shape

# What each value may be fitted within (seconds for the fixed costs).
# Wide enough for an NPU cluster and for the CPU twin (whose efficiencies are a hundred times lower).
BOUNDS: dict[str, tuple[float, float]] = {
    "prefill_efficiency": (1e-4, 1.0),
    "decode_efficiency": (1e-4, 1.0),
    "hbm_efficiency": (0.01, 1.0),
    "kernel_launch_s": (0.0, 1e-3),
    # the host's work per layer: a layer launches 10 to 40 ops, each at most tens of microseconds
    "layer_overhead_eager_s": (0.0, 0.002),
    "layer_overhead_moe_eager_s": (0.0, 0.02),  # routing and dispatch ops of a MoE layer, op by op
    "layer_overhead_graph_s": (0.0, 0.001),
    "collective_launch_s": (0.0, 0.01),
    "step_overhead_s": (0.0, 1.0),
    "sampling_per_token_s": (0.0, 1e-3),
    "layer_overhead_piecewise_s": (0.0, 0.002),
    "request_overhead_s": (0.0, 2.0),
    "prefill_expert_ratio": (0.01, 1.0),
}
AT_BOUND = 1e-3  # a fitted value within this share of its range from an end sits on the bound
MAX_STEPS = 80  # damped Gauss-Newton steps per descent, at most
# Points of each value's range (scaled to 0..1) tried one value at a time before each descent.
SCAN = (0.0, *np.geomspace(1e-6, 1.0, 19))  # costs that may be 0: steps of about 2x over six decades
LOG_SCAN = tuple(np.linspace(0.0, 1.0, 21))  # efficiencies, fitted on their log: even steps of it
SCAN_SWEEPS = 3
STEP = 1e-5  # finite-difference step, as a share of each value's range


@dataclass(frozen=True)
class Row:
    """One measured operating point and where it came from."""

    label: str
    model: ModelSpec
    cluster: Cluster
    quantization: str
    kv_dtype: str
    metric: str  # "tpot" (decode) or "ttft" (prefill)
    shape: Shape
    measured: float  # seconds
    batch_per_rank: float = 1.0  # tpot: sequences per decode DP rank
    context: float = 0.0  # tpot: mean tokens a sequence holds while decoding
    prompt: float = 0.0  # ttft: prompt tokens
    prompts_in_flight: float = 1.0  # ttft: prompts prefilled together per rank
    mtp: int = 0
    mtp_acceptance: float = 0.0
    # ttft measured at the client of a PD deployment: after prefill, the KV moves P -> D over `kv_link` (pulled
    # or pushed) and D's first step (of `decode_shape`, holding `batch_per_rank` sequences) emits the token.
    decode_shape: Shape | None = None
    kv_link: LinkTier | None = None
    kv_mode: str = "pull"
    source: str = ""  # the document the row comes from: rows of one source are left out together
    mode: ExecMode = ExecMode()  # how the measured engine ran its steps
    step_tokens: float = 0.0  # ttft of a burst: prompts prefilled this many tokens per step (0: all in one step)
    version: str = ""  # the vllm-ascend release measured, as the source states it
    era: str = ""  # the profile's era of host costs that release falls in ("" without eras)

    @cached_property
    def _cost(self) -> CostModel:
        return CostModel(self.model, self.cluster.chip, self.cluster, self.quantization, self.kv_dtype, mode=self.mode)

    def predict(self, calibration: Calibration) -> float:
        cost = self._cost.calibrated(calibration)
        if self.metric == "tpot":
            return cost.tpot(self.shape, self.batch_per_rank, self.context, self.mtp, self.mtp_acceptance)
        if self.step_tokens:
            return cost.burst_ttft(self.shape, self.prompt, round(self.prompts_in_flight), self.step_tokens)
        batch = [self.prompt] * max(1, round(self.prompts_in_flight))
        prefill = cost.prefill_time(self.shape, batch).total + cost.request_overhead()
        if self.decode_shape is None:
            return prefill
        transfer = cost.kv_transfer_time(self.shape, self.prompt, self.kv_link)
        first_step = cost.decode_step(self.decode_shape, self.batch_per_rank, self.prompt, self.mtp).total
        return prefill + cost.kv_exposed_time(transfer, prefill, self.kv_mode) + first_step


@dataclass(frozen=True)
class FitResult:
    values: dict[str, float]  # each fitted value (a `name@era` one from its era on)
    calibration: Calibration  # the fit, in the latest era of its rows
    residuals: list[tuple[Row, float, float]]  # (row, predicted seconds, predicted / measured - 1)
    leave_one_out: list[float | None]  # per row of residuals: predicted / measured - 1 when fitted without it
    at_bounds: list[str]  # fitted values that ended on an end of their range: the rows ask for more
    # per row of residuals: predicted / measured - 1 when fitted without every row of its source (None with one
    # source, or when asked not to)
    leave_source_out: list[float | None] = field(default_factory=list)


WEIGHTINGS = {"sqrt": 0.5, "rows": 0.0, "sources": 1.0}  # name -> power of a source's row count each row divides by
# Every row the same: of the three, what predicts the sources left out best (tools/calibration_weights.py).
WEIGHTING = "rows"


def _weights(rows: Sequence[Row], weighting: str = WEIGHTING) -> np.ndarray:
    """`rows` weighs every row the same; `sqrt` each of a source's n rows 1 / sqrt(n), since one source's rows share
    its hardware, version and habits; `sources` every source the same."""
    per_source = Counter(row.source for row in rows)
    return np.array([per_source[row.source] ** -WEIGHTINGS[weighting] for row in rows])


def _bounds(name: str) -> tuple[float, float]:
    return BOUNDS[name.split(ERA_MARK)[0]]


def era_calibrations(base: Calibration, values: Mapping[str, float], eras: Sequence[str]) -> dict[str, Calibration]:
    """`base` with `values` (plain names and `name@era`) for each of `eras` (oldest first)."""
    merged = {name: getattr(base, name) for name in VALUE_FIELDS} | dict(values)
    return {era: base.with_values(**era_values(merged, era, list(eras)), era=era) for era in eras}


def _eras(rows: Sequence[Row], names: Sequence[str]) -> list[str]:
    """The eras of `rows` and `names`, oldest first: era names are years, so they sort in time order."""
    return sorted({row.era for row in rows} | {name.split(ERA_MARK)[1] for name in names if ERA_MARK in name})


def _read(base: Calibration, rows: Sequence[Row], names: Sequence[str]) -> list[str]:
    """Those of `names` some row's prediction reads: from all of them at the upper end of their range (host costs
    large enough to show), each is moved alone to its lower end and kept if a prediction changes."""
    eras = _eras(rows, names)
    high = {name: _bounds(name)[1] for name in names}
    stressed = era_calibrations(base, high, eras)
    before = [row.predict(stressed[row.era]) for row in rows]
    kept = []
    for name in names:
        moved = era_calibrations(base, high | {name: _bounds(name)[0]}, eras)
        if any(row.predict(moved[row.era]) != was for row, was in zip(rows, before)):
            kept.append(name)
    return kept


def _scales(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, span, logarithmic) of each value's range: a value whose range starts above 0 (an efficiency) is fitted
    on the log of it, where a time it divides is near linear; the others, costs that may be 0, on the value."""
    ends = []
    for name in names:
        low, high = _bounds(name)
        ends.append((math.log(low), math.log(high), True) if low > 0 else (low, high, False))
    lows, highs, logarithmic = (np.array(column) for column in zip(*ends))
    return lows, highs - lows, logarithmic


def _descend(residuals: Callable[[np.ndarray], np.ndarray], u: np.ndarray,
             r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Damped Gauss-Newton (Levenberg-Marquardt) steps from `u` inside 0..1, with numerical derivatives, until a
    step no longer lowers the squared residuals."""
    damping = 1e-3
    for _ in range(MAX_STEPS):
        jacobian = np.empty((r.size, u.size))
        for k in range(u.size):
            h = STEP if u[k] + STEP <= 1.0 else -STEP
            shifted = u.copy()
            shifted[k] += h
            jacobian[:, k] = (residuals(shifted) - r) / h
        normal, gradient = jacobian.T @ jacobian, jacobian.T @ r
        improved = False
        while damping < 1e12:
            step = np.linalg.solve(normal + damping * (np.diag(np.diag(normal)) + np.eye(u.size) * 1e-12), -gradient)
            trial = np.clip(u + step, 0.0, 1.0)
            trial_r = residuals(trial)
            if trial_r @ trial_r < r @ r:
                improved = (r @ r - trial_r @ trial_r) > 1e-12 * max(r @ r, 1e-30)
                u, r, damping = trial, trial_r, max(damping / 3, 1e-9)
                break
            damping *= 4
        if not improved:
            break
    return u, r


def fit_values(base: Calibration, rows: Sequence[Row], names: Sequence[str],
               near: dict[str, float] | None = None, weighting: str = WEIGHTING) -> dict[str, float]:
    """The values of `names` that make `rows` fit best, starting from `base`: the least squares of the log-ratios
    of predicted to measured, each value inside its bounds. Rounds of a coarse scan of each value in turn, then
    descent from the best point: a step takes the longer of host and device, so a value can sit where it changes
    nothing, and no derivative there says which way to go. With `near` (a fit to rows much like these), only the
    descent from there."""
    names = _read(base, rows, names)
    eras = _eras(rows, names)
    low, span, logarithmic = _scales(names)
    root_weights = np.sqrt(_weights(rows, weighting))

    def values_of(u: np.ndarray) -> np.ndarray:
        t = low + u * span
        return np.where(logarithmic, np.exp(t), t)

    def residuals(u: np.ndarray) -> np.ndarray:
        by_era = era_calibrations(base, dict(zip(names, values_of(u).tolist())), eras)
        return root_weights * np.array([math.log(row.predict(by_era[row.era]) / row.measured) for row in rows])

    # every era starts from `base`'s own value
    start = np.array([float(near[name] if near and name in near else getattr(base, name.split(ERA_MARK)[0]))
                      for name in names])
    t = np.where(logarithmic, np.log(np.maximum(start, 1e-300)), start)
    u = np.clip((t - low) / span, 0.0, 1.0)
    r = residuals(u)
    if near:
        return dict(zip(names, values_of(_descend(residuals, u, r)[0]).tolist()))
    for _ in range(SCAN_SWEEPS):  # scan each value, then descend from there; the next scan may find a lower valley
        for k in range(len(names)):
            for share in (LOG_SCAN if logarithmic[k] else SCAN):
                trial = u.copy()
                trial[k] = share
                trial_r = residuals(trial)
                if trial_r @ trial_r < r @ r:
                    u, r = trial, trial_r
        u, r = _descend(residuals, u, r)
    return dict(zip(names, values_of(u).tolist()))


def _held_out(base: Calibration, rows: Sequence[Row], names: Sequence[str], out: Sequence[bool],
              near: dict[str, float] | None, weighting: str) -> list[float]:
    """Errors of the rows marked `out` under a fit to the others (from `base`, or descending from `near`)."""
    kept = [row for row, left in zip(rows, out) if not left]
    held = [row for row, left in zip(rows, out) if left]
    fitted = era_calibrations(base, fit_values(base, kept, names, near, weighting), _eras(rows, names))
    return [err for _, _, err in errors(fitted, held)]


def fit(base: Calibration, rows: Sequence[Row], names: Sequence[str], by_source: bool = False,
        weighting: str = WEIGHTING, by_row: bool = True) -> FitResult:
    """Fit `names` to `rows`; report each row's residual and, with `by_row` and more rows than values, its
    leave-one-out error (the row predicted by a fit to the others, descending from the whole fit: one row moves
    the optimum a little).
    With `by_source`, also each row's error under a fit to the other sources' rows only, from `base` as the whole
    fit: a source's rows share its hardware, version and habits, so leaving one row out flatters."""
    values = fit_values(base, rows, names, weighting=weighting)
    by_era = era_calibrations(base, values, _eras(rows, names))
    loo: list[float | None] = [None] * len(rows)
    if by_row and len(rows) > len(names):
        for i in range(len(rows)):
            loo[i] = _held_out(base, rows, names, [j == i for j in range(len(rows))], values, weighting)[0]
    loso: list[float | None] = [None] * len(rows)
    sources = sorted({row.source for row in rows})
    if by_source and len(sources) > 1:
        for source in sources:
            out = [row.source == source for row in rows]
            held = _held_out(base, rows, names, out, None, weighting)
            for i, err in zip([i for i, left in enumerate(out) if left], held):
                loso[i] = err
    at_bounds = [name for name, value in values.items()
                 if min(abs(value - end) for end in _bounds(name)) <= AT_BOUND * (_bounds(name)[1] - _bounds(name)[0])]
    latest = by_era[max(by_era)]
    return FitResult(values, latest, errors(by_era, rows), loo, at_bounds, loso)


def errors(calibration: Calibration | Mapping[str, Calibration],
           rows: Sequence[Row]) -> list[tuple[Row, float, float]]:
    """(row, predicted seconds, predicted / measured - 1) for each row under `calibration` (or, by era, under its
    era's)."""
    predicted = [row.predict(calibration if isinstance(calibration, Calibration) else calibration[row.era])
                 for row in rows]
    return [(row, p, p / row.measured - 1) for row, p in zip(rows, predicted)]
