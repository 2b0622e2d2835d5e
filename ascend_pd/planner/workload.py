"""Workloads as samples: prompt and output lengths drawn from a distribution or read from a JSONL trace."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascend_pd.defaults import SLO_ATTAINMENT, SLO_TPOT_MS, SLO_TTFT_MS
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.errors import InputError

Z99 = 2.3263478740408408  # standard normal 99th percentile
DEFAULT_WORKLOAD = Workload(
    input_tokens=LengthDistribution(mean=4000, p99=16000, distribution="lognormal"),
    output_tokens=LengthDistribution(mean=500, p99=2000, distribution="lognormal"),
    rate=10.0)
DEFAULT_SLO = SLO(ttft_ms=SLO_TTFT_MS, tpot_ms=SLO_TPOT_MS, attainment=SLO_ATTAINMENT)


@dataclass(frozen=True)
class LengthSamples:
    """Paired prompt and output lengths of `n` requests."""

    input_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def n(self) -> int:
        return len(self.input_tokens)

    @property
    def total(self) -> np.ndarray:
        return self.input_tokens + self.output_tokens

    def mean_decode_context(self) -> float:
        """The context a decoding sequence holds on average over its decode time: prompt plus half its output,
        weighted by output length (long outputs sit in the batch longer)."""
        i, o = self.input_tokens, self.output_tokens
        return float(np.sum(o * (i + o / 2)) / np.sum(o))


def _lognormal_sigma(mean: float, p99: float, field: str) -> float:
    """sigma of a lognormal with this mean and 99th percentile: ln(p99/mean) = z sigma - sigma^2 / 2."""
    ratio = math.log(p99 / mean)
    disc = Z99**2 - 2 * ratio
    if ratio <= 0 or disc < 0:
        raise InputError(f"p99 {p99:g} with mean {mean:g} is not a lognormal shape", field=field,
                         fix=f"give a p99 between the mean and {mean * math.exp(Z99**2 / 2):.0f}, or a std")
    return Z99 - math.sqrt(disc)


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator, field: str) -> np.ndarray:
    """`n` integer lengths from `dist`, at least 1 and within its min/max."""
    if dist.distribution == "fixed":
        values = np.full(n, dist.mean)
    elif dist.distribution == "normal":
        std = dist.std if dist.std is not None else ((dist.p99 - dist.mean) / Z99 if dist.p99 else dist.mean / 4)
        values = rng.normal(dist.mean, max(std, 0.0), n)
    else:
        if dist.std is not None:
            sigma = math.sqrt(math.log(1 + (dist.std / dist.mean) ** 2))
        elif dist.p99 is not None:
            sigma = _lognormal_sigma(dist.mean, dist.p99, field)
        else:
            sigma = 0.5
        values = rng.lognormal(math.log(dist.mean) - sigma**2 / 2, sigma, n)
    low, high = dist.min or 1, dist.max or np.inf
    return np.clip(np.rint(values), low, high)


def load_trace(path: str | Path) -> LengthSamples:
    """A JSONL trace: one {"input_tokens": N, "output_tokens": M} object per line."""
    source = str(path)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError("trace file not found", file=source, field="trace", fix="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the trace: {exc}", file=source, field="trace",
                         fix="give a UTF-8 JSONL file") from None
    inputs, outputs = [], []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
            pair = (row["input_tokens"], row["output_tokens"])
        except (json.JSONDecodeError, TypeError, KeyError):
            raise InputError("expected a JSON object with input_tokens and output_tokens", file=source, line=number,
                             field="input_tokens", fix='write one {"input_tokens": 3000, "output_tokens": 500} per '
                                                       'line') from None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
            raise InputError(f"token counts must be whole numbers of 1 or more, got {pair}", file=source,
                             line=number, field="input_tokens", fix="write positive integers")
        inputs.append(pair[0])
        outputs.append(pair[1])
    if not inputs:
        raise InputError("the trace holds no requests", file=source, field="trace", fix="add JSONL lines")
    return LengthSamples(np.array(inputs, dtype=float), np.array(outputs, dtype=float))


def samples(workload: Workload, n: int = 2000, seed: int = 0, base_dir: Path | None = None) -> LengthSamples:
    """`n` request lengths of `workload` (the trace's own requests, resampled to `n`, when it names a trace)."""
    rng = np.random.default_rng(seed)
    if workload.trace:
        path = Path(workload.trace)
        if base_dir is not None and not path.is_absolute() and not path.exists():
            path = base_dir / path
        trace = load_trace(path)
        pick = rng.integers(0, trace.n, n)
        return LengthSamples(trace.input_tokens[pick], trace.output_tokens[pick])
    return LengthSamples(sample_lengths(workload.input_tokens, n, rng, "workload.input_tokens"),
                         sample_lengths(workload.output_tokens, n, rng, "workload.output_tokens"))
