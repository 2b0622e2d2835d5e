"""What a running deployment's proxy measured (GET /v1/workload), read and checked, and fitted as a Workload."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_pd.deploy.schema import LengthDistribution, Workload
from ascend_pd.errors import InputError
from ascend_pd.planner.workload import Z99

MIN_LATENCY_SAMPLES = 20  # streamed requests below which observed TTFT/TPOT correct nothing
SPREAD_LIMIT = 0.98  # the largest share of a lognormal's p99 ceiling (mean x e^(z^2/2)) a fit uses


@dataclass(frozen=True)
class Quantiles:
    mean: float
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class Observed:
    """The proxy's window: arrivals, lengths, and the latencies clients saw."""

    source: str
    window_seconds: float
    requests: int
    failed: int
    rate: float  # requests/s
    prompt_tokens: Quantiles
    output_tokens: Quantiles
    ttft: Quantiles | None  # seconds; None: too few streamed requests to say
    tpot: Quantiles | None
    streamed: int
    partial: bool = False  # a proxy worker or replica watched less than the window (it started within it)

    def workload(self) -> Workload:
        """Lognormal prompt and output lengths with the observed means and 99th percentiles, at the observed rate."""
        return Workload(input_tokens=_lengths(self.prompt_tokens), output_tokens=_lengths(self.output_tokens),
                        rate=self.rate)

    def describe(self) -> str:
        return (f"{self.rate:.2f} req/s over {self.window_seconds:.0f} s ({self.requests} requests, {self.failed} "
                f"failed); prompts mean {self.prompt_tokens.mean:.0f} p99 {self.prompt_tokens.p99:.0f}, outputs "
                f"mean {self.output_tokens.mean:.0f} p99 {self.output_tokens.p99:.0f} tokens")


def _lengths(q: Quantiles) -> LengthDistribution:
    mean = max(1.0, q.mean)
    ceiling = mean * math.exp(Z99**2 / 2) * SPREAD_LIMIT
    if q.p99 <= mean * 1.02:  # (nearly) every request alike
        return LengthDistribution(mean=round(mean, 1), distribution="fixed")
    return LengthDistribution(mean=round(mean, 1), p99=round(min(q.p99, ceiling), 1), distribution="lognormal")


def _quantiles(raw: Any, source: str, field: str, required: bool) -> Quantiles | None:
    if raw is None:
        if required:
            raise InputError("no requests were answered in the window, so there is nothing to fit", file=source,
                             field=field, fix="observe the deployment under load, or widen --workload-window")
        return None
    try:
        values = {key: float(raw[key]) for key in ("mean", "p50", "p90", "p99")}
    except (TypeError, KeyError, ValueError):
        raise InputError("expected {mean, p50, p90, p99} numbers", file=source, field=field,
                         fix="pass what the proxy's GET /v1/workload returns") from None
    if any(not math.isfinite(v) or v < 0 for v in values.values()):
        raise InputError(f"negative or non-finite value in {values}", file=source, field=field,
                         fix="pass what the proxy's GET /v1/workload returns")
    return Quantiles(**values)


def parse_observed(document: Any, source: str) -> Observed:
    """An Observed from GET /v1/workload's JSON document; InputError naming the field when it is not one."""
    if not isinstance(document, dict):
        raise InputError("expected a JSON object", file=source, fix="pass what the proxy's GET /v1/workload returns")
    try:
        rate, window = float(document["rate_rps"]), float(document["window_seconds"])
        requests, failed, streamed = int(document["requests"]), int(document["failed"]), int(document["streamed"])
        finished = int(document.get("finished", requests))
    except KeyError as exc:
        raise InputError(f"missing {exc.args[0]}", file=source, field=exc.args[0],
                         fix="pass what the proxy's GET /v1/workload returns") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"not a number: {exc}", file=source, fix="pass what the proxy's GET /v1/workload returns") \
            from None
    if rate <= 0 or finished <= failed:
        raise InputError(f"{requests} requests arrived, {finished} ended, {failed} of them failed: no traffic was "
                         "served to fit",
                         file=source, field="rate_rps", fix="observe the deployment under load")
    enough = streamed >= MIN_LATENCY_SAMPLES
    return Observed(
        source=source, window_seconds=window, requests=requests, failed=failed, rate=rate,
        prompt_tokens=_quantiles(document.get("prompt_tokens"), source, "prompt_tokens", True),
        output_tokens=_quantiles(document.get("output_tokens"), source, "output_tokens", True),
        ttft=_quantiles(document.get("ttft_seconds"), source, "ttft_seconds", False) if enough else None,
        tpot=_quantiles(document.get("tpot_seconds"), source, "tpot_seconds", False) if enough else None,
        streamed=streamed, partial=bool(document.get("partial", False)))


def read_observed_document(path: str | Path, flag: str = "--observed") -> Any:
    """A saved GET /v1/workload answer as the JSON document it is; InputError naming the file and `flag`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror}", file=source, field=flag,
                         fix="give the file GET /v1/workload was saved to, or the proxy's URL") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc}", file=source, field=flag,
                         fix="save GET /v1/workload's answer as it is") from None


def read_observed_file(path: str | Path) -> Observed:
    return parse_observed(read_observed_document(path), str(path))
