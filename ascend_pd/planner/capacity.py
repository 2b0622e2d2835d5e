"""What one instance of a given shape sustains under the SLOs: prefill from the TTFT SLO with queueing, decode from
the TPOT SLO and KV memory, colocated (chunked prefill) from both at once."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ascend_pd.perf.cost import CostModel, accepted_tokens_per_step
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.workload import LengthSamples

DECODE_SLOT_UTILISATION = 0.9  # continuous batching keeps about this share of a rank's slots busy at steady state
KV_HEADROOM = 0.9  # share of the KV cache planned for, so growing sequences are not preempted
MAX_SEQS_PER_RANK = 512
CHUNK_SIZES = (512, 1024, 2048, 4096, 8192)
CURVE_POINTS = 48


@dataclass(frozen=True)
class Requirements:
    """The SLO (seconds) and the workload's lengths, plus how decode runs (MTP) and how KV moves."""

    ttft: float
    tpot: float
    attainment: float
    lengths: LengthSamples
    max_model_len: int
    mtp: int = 0
    mtp_acceptance: float = 0.0
    kv_mode: str = "push"

    @property
    def accepted(self) -> float:
        return accepted_tokens_per_step(self.mtp, self.mtp_acceptance)


@dataclass(frozen=True)
class Option:
    """One instance shape and what one instance of it sustains (requests/s meeting the SLO)."""

    role: str  # prefill | decode | colocated
    shape: Shape
    rate: float  # requests/s per instance
    batch_per_rank: int = 0  # decode and colocated: sequences per DP rank
    chunk_tokens: int = 0  # colocated: prefill tokens per step; prefill: tokens per batch
    tpot: float = 0.0  # decode and colocated: seconds per output token at the planned batch
    mean_ttft: float = 0.0  # prefill and colocated: mean TTFT at the planned rate per rank (no D side)

    @property
    def devices(self) -> int:
        return self.shape.devices

    @property
    def rate_per_device(self) -> float:
        return self.rate / self.devices


# --- queueing ---------------------------------------------------------------------------------------------------
def ttft_attainment(rate: float, service: np.ndarray, extra: np.ndarray, slo: float) -> float:
    """Share of requests whose wait + service + extra stays within `slo` at one M/G/1 server fed at `rate`: the wait
    is 0 with probability 1 - rho, else exponential with the Pollaczek-Khinchine mean."""
    rho = rate * float(service.mean())
    if rho >= 1:
        return 0.0
    slack = slo - service - extra
    if rate <= 0:
        return float(np.mean(slack >= 0))
    mean_wait = rate * float(np.mean(service**2)) / (2 * (1 - rho))
    tail = rho * np.exp(-rho * np.maximum(slack, 0.0) / max(mean_wait, 1e-12))
    return float(np.mean(np.where(slack >= 0, 1.0 - tail, 0.0)))


def max_rate(service: np.ndarray, extra: np.ndarray, slo: float, target: float) -> float:
    """The highest arrival rate at one server whose TTFT attainment still reaches `target` (0 if none does)."""
    if ttft_attainment(0.0, service, extra, slo) < target:
        return 0.0
    low, high = 0.0, 1.0 / float(service.mean())
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if ttft_attainment(mid, service, extra, slo) >= target else (low, mid)
    return low


def mean_ttft(rate: float, service: np.ndarray, extra: np.ndarray) -> float:
    rho = rate * float(service.mean())
    wait = rate * float(np.mean(service**2)) / (2 * (1 - rho)) if rho < 1 else math.inf
    return wait + float(np.mean(service + extra))


# --- per role ---------------------------------------------------------------------------------------------------
def prefill_service(cost: CostModel, shape: Shape, prompts: np.ndarray) -> np.ndarray:
    """Prefill time of each prompt on one DP rank, interpolated on a geometric grid of lengths."""
    grid = np.unique(np.geomspace(max(1.0, prompts.min()), prompts.max(), CURVE_POINTS).round())
    times = np.array([cost.prefill_time(shape, [float(n)]).total for n in grid])
    return np.interp(prompts, grid, times)


def prefill_option(cost: CostModel, shape: Shape, req: Requirements, kv_span_devices: int) -> Option | None:
    option = Option("prefill", shape, 0.0, chunk_tokens=req.max_model_len)
    service, extra = ttft_inputs(cost, option, req, kv_span_devices)
    rank_rate = max_rate(service, extra, req.ttft, req.attainment)
    if rank_rate <= 0:
        return None
    return Option("prefill", shape, rank_rate * shape.dp, chunk_tokens=req.max_model_len,
                  mean_ttft=mean_ttft(rank_rate, service, extra))


def decode_option(cost: CostModel, shape: Shape, req: Requirements) -> Option | None:
    """The largest batch per DP rank within the TPOT SLO and the KV cache, and the rate it sustains."""
    context = req.lengths.mean_decode_context()
    capacity = cost.memory(shape).kv_capacity_tokens
    memory_batch = min(MAX_SEQS_PER_RANK, int(KV_HEADROOM * capacity // context))
    if memory_batch < 1 or capacity < req.max_model_len:
        return None

    def tpot(batch: int) -> float:
        return cost.tpot(shape, batch, context, req.mtp, req.mtp_acceptance)

    if tpot(1) > req.tpot:
        return None
    low, high = 1, memory_batch
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if tpot(mid) <= req.tpot else (low, mid - 1)
    batch = low
    step_tpot = tpot(batch)
    mean_output = float(req.lengths.output_tokens.mean())
    rank_rate = DECODE_SLOT_UTILISATION * batch / (mean_output * step_tpot)
    return Option("decode", shape, rank_rate * shape.dp, batch_per_rank=batch, tpot=step_tpot)


def colocated_option(cost: CostModel, shape: Shape, req: Requirements) -> Option | None:
    """Chunked prefill inside the decode batch: every step runs the batch plus up to `chunk` prompt tokens, so TPOT
    pays for the chunk and a prompt of L tokens takes ceil(L / chunk) steps."""
    lengths = req.lengths
    context = lengths.mean_decode_context()
    capacity = cost.memory(shape).kv_capacity_tokens
    memory_batch = min(MAX_SEQS_PER_RANK, int(KV_HEADROOM * capacity // context))
    if memory_batch < 1 or capacity < req.max_model_len:
        return None
    prompts = lengths.input_tokens
    token_weighted = float(np.sum(prompts**2) / np.sum(prompts))
    per_prompt_token = cost.prefill_time(shape, [token_weighted]).parts
    per_token = (max(per_prompt_token["compute"], per_prompt_token["weights_read"])
                 + per_prompt_token.get("communication_exposed", 0.0)) / token_weighted
    mean_output = float(lengths.output_tokens.mean())
    best: Option | None = None
    batches = sorted({int(b) for b in np.unique(np.geomspace(1, memory_batch, 12).round())})
    for chunk in CHUNK_SIZES:
        chunk_time = chunk * per_token
        for batch in batches:
            step = cost.decode_step(shape, batch, context, req.mtp).total + chunk_time
            step_tpot = step / req.accepted
            if step_tpot > req.tpot:
                break
            slots = DECODE_SLOT_UTILISATION * batch / (mean_output * step_tpot)
            service = np.ceil(prompts / chunk) * step
            rate = min(slots, max_rate(service, np.full_like(service, step), req.ttft, req.attainment))
            if rate > 0 and (best is None or rate * shape.dp > best.rate):
                best = Option("colocated", shape, rate * shape.dp, batch_per_rank=batch, chunk_tokens=chunk,
                              tpot=step_tpot, mean_ttft=mean_ttft(rate, service, np.full_like(service, step)))
    return best


def ttft_quantile(rate: float, service: np.ndarray, extra: np.ndarray, q: float) -> float:
    """The TTFT that a share `q` of requests stays within, under the same M/G/1 wait model."""
    low, high = 0.0, float(np.max(service + extra)) + 1.0
    while ttft_attainment(rate, service, extra, high) < q and high < 1e6:
        high *= 2
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if ttft_attainment(rate, service, extra, mid) < q else (low, mid)
    return high


def ttft_inputs(cost: CostModel, option: Option, req: Requirements, kv_span_devices: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-request service time and the extra TTFT after it (KV transfer and first decode step, or the first
    colocated step) for `option`, as the capacity functions use them."""
    prompts = req.lengths.input_tokens
    if option.role == "colocated":
        step = option.tpot * req.accepted
        service = np.ceil(prompts / option.chunk_tokens) * step
        return service, np.full_like(service, step)
    service = prefill_service(cost, option.shape, prompts)
    fixed = cost.kv_transfer_time(option.shape, 0.0, kv_span_devices)  # the time is affine in the tokens moved
    transfers = fixed + prompts * (cost.kv_transfer_time(option.shape, 1.0, kv_span_devices) - fixed)
    exposed = transfers if req.kv_mode != "push" else np.maximum(transfers / cost.model.num_layers,
                                                                 transfers - service)
    return service, exposed + req.tpot * req.accepted
