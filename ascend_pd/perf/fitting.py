"""Fitting calibration values to measured serving figures, with the residual of every row and its error when fitted
without it (leave-one-row-out) or without its whole source (leave-one-source-out).

A row is one measured operating point: decode TPOT at a known batch per DP rank and context, or prefill TTFT of a
known prompt at low load or of a burst of prompts. The fit minimises the squared log-ratio of predicted to measured
over the rows, a source's rows weighing 1 / sqrt(their number) each, inside each value's bounds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ascend_pd.hardware import Cluster, LinkTier
from ascend_pd.models import ModelSpec
from ascend_pd.perf.calibration import Calibration
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

    def predict(self, calibration: Calibration) -> float:
        cost = CostModel(self.model, self.cluster.chip, self.cluster, self.quantization, self.kv_dtype, calibration,
                         mode=self.mode)
        if self.metric == "tpot":
            return cost.tpot(self.shape, self.batch_per_rank, self.context, self.mtp, self.mtp_acceptance)
        if self.step_tokens:
            return _burst_ttft(cost, self.shape, self.prompt, round(self.prompts_in_flight), self.step_tokens)
        batch = [self.prompt] * max(1, round(self.prompts_in_flight))
        prefill = cost.prefill_time(self.shape, batch).total + cost.request_overhead()
        if self.decode_shape is None:
            return prefill
        transfer = cost.kv_transfer_time(self.shape, self.prompt, self.kv_link)
        first_step = cost.decode_step(self.decode_shape, self.batch_per_rank, self.prompt, self.mtp).total
        return prefill + cost.kv_exposed_time(transfer, prefill, self.kv_mode) + first_step


def _burst_ttft(cost: CostModel, shape: Shape, prompt: float, count: int, step_tokens: float) -> float:
    """Mean TTFT of `count` prompts arriving together, prefilled in order `step_tokens` at a time: each prompt's
    first token comes with the step that holds its last token."""
    left = [prompt] * count
    now, done = 0.0, []
    while left:
        budget, chunks = step_tokens, []
        for i, tokens in enumerate(left):
            take = min(tokens, budget)
            chunks.append(take)
            left[i] -= take
            budget -= take
            if budget <= 0:
                break
        now += cost.prefill_time(shape, chunks).total
        done += [now] * sum(1 for tokens in left if tokens <= 0)
        left = [tokens for tokens in left if tokens > 0]
    return sum(done) / count + cost.request_overhead()


@dataclass(frozen=True)
class FitResult:
    values: dict[str, float]
    calibration: Calibration
    residuals: list[tuple[Row, float, float]]  # (row, predicted seconds, predicted / measured - 1)
    leave_one_out: list[float | None]  # per row of residuals: predicted / measured - 1 when fitted without it
    at_bounds: list[str]  # fitted values that ended on an end of their range: the rows ask for more
    # per row of residuals: predicted / measured - 1 when fitted without every row of its source (None with one
    # source, or when asked not to)
    leave_source_out: list[float | None] = field(default_factory=list)


WEIGHTINGS = {"sqrt": 0.5, "rows": 0.0, "sources": 1.0}  # name -> power of a source's row count each row divides by


def _weights(rows: Sequence[Row], weighting: str = "sqrt") -> np.ndarray:
    """Each row weighs 1 / sqrt(rows of its source): one source's rows share its hardware, version and habits, so
    its n rows tell more than one row and less than n independent ones. `rows` weighs every row the same,
    `sources` every source (tools/calibration_weights.py compares the three)."""
    per_source = Counter(row.source for row in rows)
    return np.array([per_source[row.source] ** -WEIGHTINGS[weighting] for row in rows])


def _scales(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, span, logarithmic) of each value's range: a value whose range starts above 0 (an efficiency) is fitted
    on the log of it, where a time it divides is near linear; the others, costs that may be 0, on the value."""
    ends = []
    for name in names:
        low, high = BOUNDS[name]
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
               near: dict[str, float] | None = None, weighting: str = "sqrt") -> dict[str, float]:
    """The values of `names` that make `rows` fit best, starting from `base`: the least squares of the log-ratios
    of predicted to measured, each value inside its bounds. Rounds of a coarse scan of each value in turn, then
    descent from the best point: a step takes the longer of host and device, so a value can sit where it changes
    nothing, and no derivative there says which way to go. With `near` (a fit to rows much like these), only the
    descent from there."""
    low, span, logarithmic = _scales(names)
    root_weights = np.sqrt(_weights(rows, weighting))

    def values_of(u: np.ndarray) -> np.ndarray:
        t = low + u * span
        return np.where(logarithmic, np.exp(t), t)

    def residuals(u: np.ndarray) -> np.ndarray:
        calibration = base.with_values(**dict(zip(names, values_of(u).tolist())))
        return root_weights * np.array([math.log(row.predict(calibration) / row.measured) for row in rows])

    start = np.array([float(near[name] if near else getattr(base, name)) for name in names])
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
    fitted = base.with_values(**fit_values(base, kept, names, near, weighting))
    return [err for _, _, err in errors(fitted, [row for row, left in zip(rows, out) if left])]


def fit(base: Calibration, rows: Sequence[Row], names: Sequence[str], by_source: bool = False,
        weighting: str = "sqrt", by_row: bool = True) -> FitResult:
    """Fit `names` to `rows`; report each row's residual and, with `by_row` and more rows than values, its
    leave-one-out error (the row predicted by a fit to the others, descending from the whole fit: one row moves
    the optimum a little).
    With `by_source`, also each row's error under a fit to the other sources' rows only, from `base` as the whole
    fit: a source's rows share its hardware, version and habits, so leaving one row out flatters."""
    values = fit_values(base, rows, names, weighting=weighting)
    fitted = base.with_values(**values)
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
                 if min(abs(value - end) for end in BOUNDS[name]) <= AT_BOUND * (BOUNDS[name][1] - BOUNDS[name][0])]
    return FitResult(values, fitted, errors(fitted, rows), loo, at_bounds, loso)


def errors(calibration: Calibration, rows: Sequence[Row]) -> list[tuple[Row, float, float]]:
    """(row, predicted seconds, predicted / measured - 1) for each row under `calibration`."""
    predicted = [row.predict(calibration) for row in rows]
    return [(row, p, p / row.measured - 1) for row, p in zip(rows, predicted)]
