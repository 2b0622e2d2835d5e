"""What one instance of a given shape sustains under the SLOs: prefill from the TTFT SLO with queueing, decode from
the TPOT SLO and KV memory, colocated (chunked prefill) from both at once."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ascend_pd.defaults import DECODE_SLOT_UTILISATION, KV_HEADROOM, MAX_SEQS_PER_RANK, PREFILL_BATCH_TOKENS
from ascend_pd.perf.cost import CostModel, accepted_tokens_per_step
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.prefill_queue import PrefillPool
from ascend_pd.planner.workload import LengthSamples

CHUNK_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192)
SIZING_RANKS = 8  # prefill ranks a shape is sized on: two-choice routing gains little beyond this many
SIZING_REQUESTS = 1000
SIZING_STEPS = 10  # halvings of the rate bracket: within 0.1% of the ceiling
MAX_PREFILL_LOAD = 0.9  # highest share of its back-to-back capacity a prefill rank is planned to carry
PREDICT_REPEATS = 4  # the planned prompts played this many times over for the predicted figures
CURVE_LOADS = 18  # loads at which the colocated TTFT curve is played out


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
    connector: str = "ascend-pd"  # connector.implementation the plan writes

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
    chunk_step: float = 0.0  # colocated: seconds of a step that carries a prompt chunk

    @property
    def devices(self) -> int:
        return self.shape.devices

    @property
    def rate_per_device(self) -> float:
        return self.rate / self.devices


# --- per role ---------------------------------------------------------------------------------------------------
def prefill_ceiling(cost: CostModel, shape: Shape, req: Requirements) -> float:
    """Requests/s one instance prefills with its queues never empty: no arrival rate beyond it is stable."""
    option = Option("prefill", shape, 0.0, chunk_tokens=prefill_batch_tokens(req))
    return shape.dp * prefill_pool(cost, option, req).saturated_rate()


def prefill_option(cost: CostModel, shape: Shape, req: Requirements, kv_span_devices: int,
                   ceiling: float) -> Option | None:
    """The highest rate per instance at which the TTFT of the attainment share of requests meets the SLO, played
    out on a pool of SIZING_RANKS ranks routed like the proxy (the instance count is not known yet), and at most
    MAX_PREFILL_LOAD of what the ranks prefill back to back (`ceiling`, per instance: prefill_ceiling): a short run
    cannot show a queue near capacity growing."""
    option = Option("prefill", shape, 0.0, chunk_tokens=prefill_batch_tokens(req))
    pool = prefill_pool(cost, option, req, SIZING_REQUESTS)
    first_step = req.tpot * req.accepted  # decode's first step, at the SLO's pace

    def attained(rate: float) -> float:
        return prefill_attainment(cost, pool, req, rate, SIZING_RANKS, kv_span_devices, first_step)

    if attained(1e-6 * SIZING_RANKS) < req.attainment:
        return None
    low, high = 0.0, MAX_PREFILL_LOAD * ceiling / shape.dp * SIZING_RANKS
    if attained(high) >= req.attainment:
        low = high
    for _ in range(SIZING_STEPS if low < high else 0):
        mid = (low + high) / 2
        low, high = (mid, high) if attained(mid) >= req.attainment else (low, mid)
    if low <= 0:
        return None
    return replace(option, rate=low / SIZING_RANKS * shape.dp)


def prefill_pool(cost: CostModel, option: Option, req: Requirements, requests: int | None = None,
                 repeats: int = 1) -> PrefillPool:
    """The planned prompts (the first `requests` of them) on ranks of the option's shape."""
    prompts = req.lengths.input_tokens[:requests]
    return PrefillPool(cost, option.shape, option.chunk_tokens, prompts, repeats)


def prefill_ttft(cost: CostModel, pool: PrefillPool, req: Requirements, rate: float, ranks: int,
                 kv_span_devices: int, first_step: float) -> np.ndarray:
    """TTFT of each request: its wait and batch on the prefill pool, the KV transfer that batch leaves exposed,
    decode's first step and the server's own path to the first token."""
    run = pool.run(rate, ranks)
    prompts = np.asarray(pool.prompts, dtype=float)[-run.latency.size:]
    link = cost.kv_link(kv_span_devices)
    fixed = cost.kv_transfer_time(pool.shape, 0.0, link)  # the time is affine in the tokens moved
    transfers = fixed + prompts * (cost.kv_transfer_time(pool.shape, 1.0, link) - fixed)
    exposed = transfers if req.kv_mode != "push" else np.maximum(transfers / cost.model.num_layers,
                                                                 transfers - run.batch_duration)
    return run.latency + exposed + first_step + cost.request_overhead()


def prefill_attainment(cost: CostModel, pool: PrefillPool, req: Requirements, rate: float, ranks: int,
                       kv_span_devices: int, first_step: float) -> float:
    ttft = prefill_ttft(cost, pool, req, rate, ranks, kv_span_devices, first_step)
    return float(np.mean(ttft <= req.ttft))


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


def operating_batch(tpot_at: Callable[[float], float], rank_rate: float, req: Requirements, most: int) -> float:
    """The batch B a rank fed `rank_rate` requests/s holds, by Little's law: B = rate x output tokens x TPOT(B).
    TPOT grows with B, so iterating from one sequence climbs to the fixed point from below (at most `most`)."""
    mean_output = float(req.lengths.output_tokens.mean())
    batch = 1.0
    for _ in range(100):
        updated = min(rank_rate * mean_output * tpot_at(max(batch, 1.0)), float(most))
        if abs(updated - batch) < 1e-3:
            break
        batch = updated
    return max(batch, 1.0)


def decode_operating_tpot(cost: CostModel, option: Option, req: Requirements, rank_rate: float) -> float:
    """TPOT on a decode rank fed `rank_rate` requests/s, at the batch it holds (operating_batch)."""
    context = req.lengths.mean_decode_context()

    def tpot_at(batch: float) -> float:
        return cost.tpot(option.shape, batch, context, req.mtp, req.mtp_acceptance)

    return tpot_at(operating_batch(tpot_at, rank_rate, req, option.batch_per_rank))


def colocated_operating_point(cost: CostModel, option: Option, req: Requirements,
                              rank_rate: float) -> tuple[float, float]:
    """(TPOT, seconds per prompt token) on a colocated rank fed `rank_rate` requests/s: its batch B follows Little's
    law, B = rate x output tokens x TPOT(B), where TPOT(B) is the mean step (decode step at B plus its share of
    chunk steps) over the accepted tokens; the prompt queue moves `chunk` tokens per step of B plus a chunk."""
    shape, chunk = option.shape, option.chunk_tokens
    prompts = req.lengths.input_tokens
    context = req.lengths.mean_decode_context()
    chunk_time = cost.chunk_time(shape, chunk, float(np.sum(prompts**2) / np.sum(prompts)))
    chunks_per_request = float(np.mean(np.ceil(prompts / chunk)))
    lockstep = shape.dp if shape.ep > 1 else 1

    def at(batch: float) -> tuple[float, float]:
        step = cost.decode_step(shape, batch, context, req.mtp).total
        mean = colocated_mean_step(rank_rate, step, chunk_time, chunks_per_request, lockstep)
        return mean / req.accepted, (step + chunk_time) / chunk

    return at(operating_batch(lambda batch: at(batch)[0], rank_rate, req, option.batch_per_rank))


def colocated_mean_step(rate: float, decode_step: float, chunk_time: float, chunks_per_request: float,
                        lockstep: int) -> float:
    """Mean step of a colocated rank fed `rate` requests/s. A step takes decode_step, plus chunk_time when it carries
    a prompt chunk; with expert parallelism the `lockstep` DP ranks of an instance step together, so a step pays
    for a chunk if any of them has one. The share of chunk steps depends on the step itself: a fixed point."""
    chunks_per_s = rate * chunks_per_request
    if lockstep == 1:  # step = decode_step + chunks_per_s * step * chunk_time, solved
        share = chunks_per_s * chunk_time
        return decode_step / (1 - share) if share < 1 else math.inf
    step = decode_step
    for _ in range(40):
        own = chunks_per_s * step
        if own >= 1:
            return math.inf
        updated = decode_step + (1 - (1 - own) ** lockstep) * chunk_time
        if abs(updated - step) < 1e-9:
            break
        step = updated
    return step


def _highest(ok: Callable[[float], bool], high: float) -> float:
    """The largest rate in [0, high] for which `ok` holds (ok is monotone: true up to a point)."""
    low = 0.0
    for _ in range(25):
        mid = (low + high) / 2
        low, high = (mid, high) if ok(mid) else (low, mid)
    return low


@dataclass(frozen=True)
class FluidCurve:
    """How long prompts wait and prefill on colocated ranks, in units where a prompt token takes one second: the
    attainment quantile of TTFT on SIZING_RANKS ranks at each load. A rank that prefills s seconds per token scales
    time by s, so one curve serves every shape and chunk size."""

    loads: np.ndarray
    quantiles: np.ndarray  # seconds at one second per token
    mean_prompt: float

    @classmethod
    def of(cls, req: Requirements) -> "FluidCurve":
        pool = PrefillPool.fluid(req.lengths.input_tokens[:SIZING_REQUESTS], 1.0)
        mean = float(np.mean(pool.prompts))
        loads = np.linspace(0.05, MAX_PREFILL_LOAD, CURVE_LOADS)
        quantiles = [np.quantile(pool.run(load * SIZING_RANKS / mean, SIZING_RANKS).latency, req.attainment)
                     for load in loads]
        return cls(loads, np.maximum.accumulate(quantiles), mean)

    def rate_within(self, slo: float, seconds_per_token: float) -> float:
        """Requests/s per rank at which the attainment share of prompts waits and prefills within `slo`."""
        scaled = self.quantiles * seconds_per_token
        if scaled[0] > slo:
            return 0.0
        load = float(np.interp(slo, scaled, self.loads)) if scaled[-1] > slo else float(self.loads[-1])
        return load / (seconds_per_token * self.mean_prompt)


def colocated_option(cost: CostModel, shape: Shape, req: Requirements, curve: FluidCurve) -> Option | None:
    """Chunked prefill inside the decode batch: TPOT is the mean step over accepted tokens and must meet the SLO,
    the decode slots must hold the requests in flight (Little's law), and a prompt of L tokens waits for its
    ceil(L / C) chunk steps behind the prompts queued before it."""
    lengths = req.lengths
    context = lengths.mean_decode_context()
    capacity = cost.memory(shape).kv_capacity_tokens
    memory_batch = min(MAX_SEQS_PER_RANK, int(KV_HEADROOM * capacity // context))
    if memory_batch < 1 or capacity < req.max_model_len:
        return None
    prompts = lengths.input_tokens
    token_weighted = float(np.sum(prompts**2) / np.sum(prompts))  # the prompt length a prompt token sits in
    mean_output = float(lengths.output_tokens.mean())
    lockstep = shape.dp if shape.ep > 1 else 1
    step_limit = req.tpot * req.accepted
    best: Option | None = None
    batches = sorted({int(b) for b in np.unique(np.geomspace(1, memory_batch, 12).round())})
    decode_steps = {batch: cost.decode_step(shape, batch, context, req.mtp).total for batch in batches}
    for chunk in CHUNK_SIZES:
        chunk_time = cost.chunk_time(shape, chunk, token_weighted)
        chunks_per_request = float(np.mean(np.ceil(prompts / chunk)))
        ceiling = 1 / (chunks_per_request * (chunk_time + min(decode_steps.values())))
        for batch in reversed(batches):
            step = decode_steps[batch]
            if step / req.accepted >= req.tpot:
                continue
            slots = DECODE_SLOT_UTILISATION * batch * req.accepted / mean_output

            def within(rate: float, step: float = step, slots: float = slots, chunk_time: float = chunk_time,
                       chunks_per_request: float = chunks_per_request) -> bool:
                mean = colocated_mean_step(rate, step, chunk_time, chunks_per_request, lockstep)
                return mean <= step_limit and rate * mean <= slots

            by_tpot_and_slots = _highest(within, ceiling)
            if best is not None and by_tpot_and_slots * shape.dp <= best.rate:
                continue
            # the server's way to the first token comes out of the TTFT budget before any chunk step
            by_ttft = curve.rate_within(req.ttft - cost.request_overhead(), (step + chunk_time) / chunk)
            rate = min(by_tpot_and_slots, by_ttft)
            if rate > 0 and (best is None or rate * shape.dp > best.rate):
                mean_step = colocated_mean_step(rate, step, chunk_time, chunks_per_request, lockstep)
                best = Option("colocated", shape, rate * shape.dp, batch_per_rank=batch, chunk_tokens=chunk,
                              tpot=mean_step / req.accepted, chunk_step=step + chunk_time)
    return best


def prefill_batch_tokens(req: Requirements) -> int:
    return min(req.max_model_len, PREFILL_BATCH_TOKENS)
