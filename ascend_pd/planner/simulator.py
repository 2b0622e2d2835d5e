"""Discrete-event simulation of a deployment: Poisson arrivals routed like the proxy's least-loaded policy (the
lighter of two random ranks) and batched prefill on P, both played out on the planner's model (`prefill_stage.py`),
KV transfer, continuous batching on D within max_num_seqs and the KV cache, chunked prefill on colocated instances.

Decode ranks advance as a fluid between events: with B sequences a rank emits `accepted` tokens per sequence every
step(B, context), so only admissions and completions are events, not every step. Step and prefill times come from
the same CostModel the planner uses.
"""

from __future__ import annotations

import heapq
import itertools
import random
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ascend_pd.defaults import MTP_ACCEPTANCE
from ascend_pd.deploy.schema import SLO, Deployment, Instance
from ascend_pd.deploy.vllm_flags import draft_config
from ascend_pd.hardware import LinkTier
from ascend_pd.perf.cost import CostModel, accepted_tokens_per_step
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.modes import instance_cost
from ascend_pd.planner.prefill_stage import RankQueue, two_choices
from ascend_pd.planner.replicas import MAX_SIMULATED_REQUESTS, identical_groups
from ascend_pd.planner.workload import LengthSamples

CONTEXT_POINTS = 12
DRAIN_FACTOR = 4.0  # stop at this many durations even if counted requests are still running


@dataclass
class Request:
    id: int
    arrival: float
    prompt: int
    output: int
    first_token: float = math.nan
    finish: float = math.nan
    admit_progress: float = 0.0
    ready: bool = False  # its KV is on the decode rank (or its prompt is prefilled there)


class StepTable:
    """Decode step time of one shape over batch sizes 1..max_seqs and a grid of mean contexts."""

    def __init__(self, cost: CostModel, shape: Shape, max_seqs: int, max_context: int, mtp: int):
        self.contexts = np.geomspace(64, max(max_context, 128), CONTEXT_POINTS)
        self.table = np.array([[cost.decode_step(shape, b, c, mtp).total for c in self.contexts]
                               for b in range(1, max_seqs + 1)])

    def step(self, batch: int, context: float) -> float:
        return float(np.interp(context, self.contexts, self.table[min(batch, len(self.table)) - 1]))


class PrefillRank(RankQueue[Request]):
    """One DP rank of a prefill instance: its queue, and where and how fast it runs."""

    def __init__(self, instance: Instance, shape: Shape, first_device, batch_tokens: int):
        super().__init__(batch_tokens)
        self.instance, self.shape, self.first_device = instance, shape, first_device


@dataclass
class DecodeRank:
    """One DP rank that decodes (a decode instance's, or a colocated one's with its own prefill queue)."""

    instance: Instance
    shape: Shape
    first_device: object
    table: StepTable
    max_seqs: int
    kv_capacity: float
    accepted: float
    chunk: int = 0  # colocated: prompt tokens per step
    chunk_time: float = 0.0  # colocated: seconds a chunk adds to a step
    progress: float = 0.0  # tokens emitted per active sequence since the start
    last: float = 0.0
    speed: float = 0.0  # progress per second at the current batch
    prefill_speed: float = 0.0  # colocated: prompt tokens per second while prompts wait
    active: list = field(default_factory=list)  # heap of (finish progress, id, request)
    waiting: deque = field(default_factory=deque)  # KV arrived (or prompt done), waiting for a slot
    prompts: deque = field(default_factory=deque)  # colocated: prompts being chunk-prefilled, FIFO
    prompt_left: float = 0.0  # colocated: tokens left of the head prompt
    prompt_sum: float = 0.0
    admit_sum: float = 0.0
    version: int = 0
    lockstep: list | None = None  # colocated with EP: the instance's ranks, which step together
    prefilling: list | None = None  # shared one-item counter: ranks of the lockstep group holding prompts

    @property
    def load(self) -> int:
        return len(self.active) + len(self.waiting) + len(self.prompts)

    def context_used(self) -> float:
        return self.prompt_sum + len(self.active) * self.progress - self.admit_sum

    def advance(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed > 0:
            self.progress += elapsed * self.speed
            if self.prompts:
                self.prompt_left -= elapsed * self.prefill_speed
        self.last = now

    def step_time(self) -> float:
        batch = len(self.active)
        base = self.table.step(max(batch, 1), self.context_used() / batch if batch else 64.0)
        chunk_in_step = self.prompts or (self.prefilling is not None and self.prefilling[0] > 0)
        return base + (self.chunk_time if chunk_in_step else 0.0)

    def retime(self) -> None:
        step = self.step_time()
        self.speed = self.accepted / step if self.active else 0.0
        self.prefill_speed = self.chunk / step if self.prompts else 0.0
        self.version += 1


class Simulation:
    def __init__(self, deployment: Deployment, cost: CostModel, slo: SLO, token_weighted_prompt: float,
                 mtp_acceptance: float = MTP_ACCEPTANCE, seed: int = 0):
        self.deployment, self.cost, self.slo = deployment, cost, slo
        self.rng = np.random.default_rng(seed)
        self.pick = random.Random(seed)
        self.events: list = []
        self.counter = itertools.count()
        self.mode = deployment.connector.mode
        self.prefill: list[PrefillRank] = []
        self.decode: list[DecodeRank] = []
        cluster = cost.cluster
        tables: dict[tuple, StepTable] = {}
        groups: dict[str, tuple[list, list]] = {}
        self.costs = {inst.name: instance_cost(cost, deployment, inst) for inst in deployment.instances}
        for inst in deployment.instances:
            shape = Shape(inst.parallel.tp, inst.parallel.dp, inst.parallel.ep, inst.parallel.pp)
            mtp = _mtp_tokens(inst)
            priced = self.costs[inst.name]
            for _, leader, _ in inst.endpoints():
                device = cluster.device(leader.node, leader.devices[0])
                if inst.role == "prefill":
                    self.prefill.append(PrefillRank(inst, shape, device, inst.vllm.max_num_batched_tokens))
                    continue
                key = (shape, inst.vllm.max_num_seqs, inst.vllm.max_model_len, mtp, priced.mode)
                if key not in tables:
                    tables[key] = StepTable(priced, shape, inst.vllm.max_num_seqs, inst.vllm.max_model_len, mtp)
                rank = DecodeRank(inst, shape, device, tables[key], inst.vllm.max_num_seqs,
                                  priced.memory(shape, inst.vllm.gpu_memory_utilization).kv_capacity_tokens,
                                  accepted_tokens_per_step(mtp, mtp_acceptance if mtp else 0.0))
                if inst.role == "colocated":
                    rank.chunk = max(1, inst.vllm.max_num_batched_tokens - inst.vllm.max_num_seqs * (1 + mtp))
                    rank.chunk_time = priced.chunk_time(shape, rank.chunk, token_weighted_prompt)
                if inst.role == "colocated" and shape.ep > 1 and shape.dp > 1:
                    group = groups.setdefault(inst.name, ([], [0]))
                    group[0].append(rank)
                    rank.lockstep, rank.prefilling = group
                rank.retime()
                self.decode.append(rank)
        self.decode_only = [r for r in self.decode if r.chunk == 0]
        self.colocated = [r for r in self.decode if r.chunk > 0]

    # --- event plumbing ------------------------------------------------------------------------------------------
    def push(self, time: float, kind: str, *payload) -> None:
        heapq.heappush(self.events, (time, next(self.counter), kind, payload))

    def _two_choices(self, ranks: list, load):
        """The proxy's least-loaded policy, its two ranks drawn from this run's random stream."""
        return two_choices(ranks, lambda count: self.pick.sample(range(count), 2), load)

    def _link(self, a, b) -> LinkTier | None:
        return self.cost.cluster.link_between(a, b)

    # --- prefill -------------------------------------------------------------------------------------------------
    def _start_batch(self, rank: PrefillRank, now: float) -> None:
        batch = rank.start().items
        duration = self.costs[rank.instance.name].prefill_time(rank.shape, [float(r.prompt) for r in batch]).total
        self.push(now + duration, "prefill_done", rank, duration)

    def _prefill_done(self, now: float, rank: PrefillRank, duration: float) -> None:
        for request in rank.finish().items:
            target = self._two_choices(self.decode_only, lambda r: r.load)
            transfer = self.cost.kv_transfer_time(rank.shape, request.prompt,
                                                  self._link(rank.first_device, target.first_device))
            exposed = self.cost.kv_exposed_time(transfer, duration, self.mode)
            target.waiting.append(request)  # reserve the place now so routing sees the load
            self.push(now + exposed, "kv_arrived", target, request)
        if rank.queue:
            self._start_batch(rank, now)

    # --- decode --------------------------------------------------------------------------------------------------
    def _next_ready(self, rank: DecodeRank) -> Request | None:
        return next((r for r in rank.waiting if r.ready), None)

    def _admit(self, rank: DecodeRank, now: float) -> None:
        """Start waiting requests (in arrival order among those ready) while slots and KV cache allow."""
        while len(rank.active) < rank.max_seqs:
            request = self._next_ready(rank)
            if request is None or (rank.active and rank.context_used() + request.prompt > rank.kv_capacity):
                break
            rank.waiting.remove(request)
            request.admit_progress = rank.progress
            first_from_decode = math.isnan(request.first_token)
            to_emit = request.output if first_from_decode else request.output - 1  # chunked prefill emitted one
            rank.prompt_sum += request.prompt
            rank.admit_sum += rank.progress
            heapq.heappush(rank.active, (rank.progress + max(to_emit, 1), request.id, request))
            if first_from_decode:
                request.first_token = now + rank.step_time()  # decode's first step emits the first token

    def _schedule(self, rank: DecodeRank, now: float) -> None:
        rank.retime()
        times = []
        if rank.active:
            times.append(now + (rank.active[0][0] - rank.progress) / rank.speed)
        if rank.prompts:
            times.append(now + max(rank.prompt_left, 0.0) / rank.prefill_speed)
        if times:
            self.push(min(times), "rank_event", rank, rank.version)

    def _prompts_changed(self, rank: DecodeRank, had_prompts: bool, now: float) -> None:
        """A rank of a lockstep group started or stopped prefilling: every rank of the group changes step time."""
        if rank.lockstep is None or bool(rank.prompts) == had_prompts:
            return
        rank.prefilling[0] += 1 if rank.prompts else -1
        for other in rank.lockstep:
            if other is not rank:
                other.advance(now)
                self._schedule(other, now)

    def _rank_event(self, now: float, rank: DecodeRank) -> None:
        rank.advance(now)
        had_prompts = bool(rank.prompts)
        while rank.active and rank.active[0][0] <= rank.progress + 1e-9:
            _, _, request = heapq.heappop(rank.active)
            request.finish = now
            rank.prompt_sum -= request.prompt
            rank.admit_sum -= request.admit_progress
        while rank.prompts and rank.prompt_left <= 1e-9:
            done = rank.prompts.popleft()
            done.first_token, done.ready = now, True
            rank.waiting.append(done)
            if rank.prompts:
                rank.prompt_left += rank.prompts[0].prompt
        self._admit(rank, now)
        self._schedule(rank, now)
        self._prompts_changed(rank, had_prompts, now)

    # --- the run -------------------------------------------------------------------------------------------------
    def run(self, lengths: LengthSamples, rate: float, duration: float, warmup: float) -> dict:
        arrivals = np.cumsum(self.rng.exponential(1 / rate, lengths.n))
        requests = [Request(i, float(t), int(p), int(o)) for i, (t, p, o) in
                    enumerate(zip(arrivals, lengths.input_tokens, lengths.output_tokens)) if t < duration]
        for request in requests:
            self.push(request.arrival, "arrival", request)
        horizon = duration * DRAIN_FACTOR
        while self.events:
            now, _, kind, payload = heapq.heappop(self.events)
            if now > horizon:
                break
            if kind == "arrival":
                self._arrival(now, payload[0])
            elif kind == "prefill_done":
                self._prefill_done(now, *payload)
            elif kind == "kv_arrived":
                rank, request = payload
                request.ready = True
                rank.advance(now)
                self._admit(rank, now)
                self._schedule(rank, now)
            elif kind == "rank_event":
                rank, version = payload
                if version == rank.version:
                    self._rank_event(now, rank)
        return summarise(requests, self.slo, warmup, duration, self.cost.request_overhead())

    def _arrival(self, now: float, request: Request) -> None:
        if self.prefill:
            rank = self._two_choices(self.prefill, lambda r: r.outstanding)
            rank.enqueue(request, request.prompt)
            if rank.running is None:
                self._start_batch(rank, now)
            return
        rank = self._two_choices(self.colocated, lambda r: r.load)
        rank.advance(now)
        had_prompts = bool(rank.prompts)
        if not had_prompts:
            rank.prompt_left = request.prompt
        rank.prompts.append(request)
        self._schedule(rank, now)
        self._prompts_changed(rank, had_prompts, now)


def _mtp_tokens(instance: Instance) -> int:
    """num_speculative_tokens of the instance's `--speculative-config`, read as validation reads it."""
    draft = draft_config(instance)
    return (draft.num_speculative_tokens or 0) if draft else 0


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"p50": math.nan, "p90": math.nan, "p99": math.nan}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}


def summarise(requests: list[Request], slo: SLO, warmup: float, duration: float,
              request_overhead: float = 0.0) -> dict:
    """Figures over requests that arrived in [warmup, duration); unfinished ones count as missing the SLO. TTFT
    adds the server's own path to the first token (`request_overhead` seconds), which no engine step holds."""
    counted = [r for r in requests if warmup <= r.arrival < duration]
    done = [r for r in counted if not math.isnan(r.finish)]
    ttft = np.array([(r.first_token - r.arrival + request_overhead) * 1e3 for r in done])
    tpot = np.array([(r.finish - r.first_token) / max(r.output - 1, 1) * 1e3 for r in done])
    met = int(np.sum((ttft <= slo.ttft_ms) & (tpot <= slo.tpot_ms))) if done else 0
    window = duration - warmup
    return {"requests": len(counted), "completed": len(done), "rate_rps": len(counted) / window,
            "goodput_rps": met / window, "slo_attainment": met / len(counted) if counted else 0.0,
            "ttft_ms": _percentiles(ttft), "tpot_ms": _percentiles(tpot),
            "window_s": window}


def simulate(deployment: Deployment, cost: CostModel, workload, slo: SLO, duration: float, warmup: float,
             seed: int = 0, mtp_acceptance: float = MTP_ACCEPTANCE, base_dir=None) -> dict:
    """Run `deployment` under `workload` for `duration` seconds; figures count requests arriving after `warmup`.
    A deployment of identical SuperPoD groups whose arrivals pass MAX_SIMULATED_REQUESTS runs one group at its
    share of the rate; totals are scaled back and `simulated_groups` says how many of `groups` ran."""
    from ascend_pd.planner.workload import samples

    replicas = identical_groups(deployment, cost.cluster)
    if replicas is not None and workload.rate * duration > MAX_SIMULATED_REQUESTS:
        share = workload.model_copy(update={"rate": workload.rate / replicas.count})
        result = simulate(replicas.group, cost, share, slo, duration, warmup, seed, mtp_acceptance, base_dir)
        for total in ("requests", "completed", "rate_rps", "goodput_rps"):
            result[total] *= replicas.count
        result["groups"] = replicas.count
        return result

    count = int(workload.rate * duration * 1.2) + 100
    lengths = samples(workload, count, seed=seed + 1, base_dir=base_dir)
    limit = min(inst.vllm.max_model_len for inst in deployment.instances)
    keep = lengths.total <= limit  # vLLM rejects longer requests: they never reach an instance and count as missed
    served = float(keep.mean())
    prompts = lengths.input_tokens[keep]
    token_weighted = float(np.sum(prompts**2) / np.sum(prompts))  # the prompt length a prompt token sits in
    result = Simulation(deployment, cost, slo, token_weighted, mtp_acceptance, seed).run(
        LengthSamples(lengths.input_tokens[keep], lengths.output_tokens[keep]), workload.rate * served,
        duration, warmup)
    result["rejected_share"] = 1 - served
    result["groups"] = result["simulated_groups"] = 1
    result["rate_rps"] /= served
    result["slo_attainment"] *= served
    return result
