"""Fitting calibration values to measured serving figures, with the residual of every row and leave-one-out errors.

A row is one measured operating point: decode TPOT at a known batch per DP rank and context, or prefill TTFT of a
known prompt at low load. The fit minimises the squared log-ratio of predicted to measured over the rows, one value
at a time by golden-section search inside its bounds, sweeping until the values settle (the model is monotone in each
value, and there are two or three of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ascend_pd.hardware import Cluster, LinkTier
from ascend_pd.models import ModelSpec
from ascend_pd.perf.calibration import Calibration
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape

# What each value may be fitted within (seconds for the fixed costs).
# Wide enough for an NPU cluster and for the CPU twin (whose efficiencies are a hundred times lower).
BOUNDS: dict[str, tuple[float, float]] = {
    "prefill_efficiency": (1e-4, 1.0),
    "decode_efficiency": (1e-4, 1.0),
    "hbm_efficiency": (0.01, 1.0),
    "kernel_launch_s": (0.0, 1e-3),
    "layer_overhead_eager_s": (0.0, 0.05),
    "layer_overhead_graph_s": (0.0, 0.02),
    "collective_launch_s": (0.0, 0.01),
    "step_overhead_s": (0.0, 1.0),
    "sampling_per_token_s": (0.0, 1e-3),
}
AT_BOUND = 1e-3  # a fitted value within this share of its range from an end sits on the bound
SWEEPS = 8
GOLDEN_STEPS = 40


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

    def predict(self, calibration: Calibration) -> float:
        cost = CostModel(self.model, self.cluster.chip, self.cluster, self.quantization, self.kv_dtype, calibration)
        if self.metric == "tpot":
            return cost.tpot(self.shape, self.batch_per_rank, self.context, self.mtp, self.mtp_acceptance)
        batch = [self.prompt] * max(1, round(self.prompts_in_flight))
        prefill = cost.prefill_time(self.shape, batch).total
        if self.decode_shape is None:
            return prefill
        transfer = cost.kv_transfer_time(self.shape, self.prompt, self.kv_link)
        first_step = cost.decode_step(self.decode_shape, self.batch_per_rank, self.prompt, self.mtp).total
        return prefill + cost.kv_exposed_time(transfer, prefill, self.kv_mode) + first_step


@dataclass(frozen=True)
class FitResult:
    values: dict[str, float]
    calibration: Calibration
    residuals: list[tuple[Row, float, float]]  # (row, predicted seconds, predicted / measured - 1)
    leave_one_out: list[float | None]  # per row of residuals: predicted / measured - 1 when fitted without it
    at_bounds: list[str]  # fitted values that ended on an end of their range: the rows ask for more



def _loss(calibration: Calibration, rows: Sequence[Row]) -> float:
    return sum(math.log(row.predict(calibration) / row.measured) ** 2 for row in rows)


def _golden(f: Callable[[float], float], low: float, high: float) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(GOLDEN_STEPS):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_values(base: Calibration, rows: Sequence[Row], names: Sequence[str]) -> dict[str, float]:
    """The values of `names` that make `rows` fit best, starting from `base`."""
    values = {name: float(getattr(base, name)) for name in names}
    for _ in range(SWEEPS):
        before = dict(values)
        for name in names:
            low, high = BOUNDS[name]
            values[name] = _golden(lambda v: _loss(base.with_values(**{**values, name: v}), rows), low, high)
        if all(math.isclose(values[n], before[n], rel_tol=1e-4, abs_tol=1e-9) for n in names):
            break
    return values


def fit(base: Calibration, rows: Sequence[Row], names: Sequence[str]) -> FitResult:
    """Fit `names` to `rows`; report each row's residual and, with more rows than values, its leave-one-out error
    (the row predicted by a fit to the others)."""
    values = fit_values(base, rows, names)
    fitted = base.with_values(**values)
    loo: list[float | None] = [None] * len(rows)
    if len(rows) > len(names):
        for i, row in enumerate(rows):
            others = [r for j, r in enumerate(rows) if j != i]
            loo[i] = errors(base.with_values(**fit_values(base, others, names)), [row])[0][2]
    at_bounds = [name for name, value in values.items()
                 if min(abs(value - end) for end in BOUNDS[name]) <= AT_BOUND * (BOUNDS[name][1] - BOUNDS[name][0])]
    return FitResult(values, fitted, errors(fitted, rows), loo, at_bounds)


def errors(calibration: Calibration, rows: Sequence[Row]) -> list[tuple[Row, float, float]]:
    """(row, predicted seconds, predicted / measured - 1) for each row under `calibration`."""
    predicted = [row.predict(calibration) for row in rows]
    return [(row, p, p / row.measured - 1) for row, p in zip(rows, predicted)]
