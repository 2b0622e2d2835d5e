"""How long prompts wait and run on a pool of prefill ranks, played out request by request.

The proxy sends each request to the lighter (by prompt tokens queued or running) of two random prefill ranks, and a
rank prefills its queue in FIFO batches of whole prompts up to its batch-token budget, so one step serves several
short prompts. Closed-form queues miss both effects (an M/G/2 queue waits three times longer than two-choice routing
over tens of ranks, and ignores batching, which on a small model multiplies capacity), so the planner plays out the
simulator's model of the prefill stage (`prefill_stage.py`) on its own, with fixed random draws: the same draws at a
higher rate never finish sooner, which keeps a search over the rate monotone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.prefill_stage import Batch, RankQueue, two_choices

WARMUP_SHARE = 0.1  # requests left out while the pool fills from empty
StepTime = Callable[[float, float, int], float]


@dataclass(frozen=True)
class PrefillRun:
    """Per request (after warm-up): seconds from arrival until its batch finished, and that batch's duration."""

    latency: np.ndarray
    batch_duration: np.ndarray


class PrefillPool:
    """`ranks` DP ranks of one prefill shape, each batching up to `batch_tokens` prompt tokens per step."""

    def __init__(self, cost: CostModel | None, shape: Shape | None, batch_tokens: int, prompts: np.ndarray,
                 repeats: int = 1, seed: int = 0, step_time: StepTime | None = None):
        """`repeats` > 1 plays the prompts that many times over in a random order: a longer run, nearer the
        steady state a queue close to its capacity takes long to reach. `step_time` replaces the shape's prefill
        batch time (tokens, sum of squared prompt lengths, prompts) -> seconds."""
        rng = np.random.default_rng(seed)
        self.cost, self.shape, self.batch_tokens = cost, shape, batch_tokens
        self.step_time = step_time or cost.prefill_step_timer(shape)
        if repeats > 1:
            prompts = rng.permutation(np.tile(prompts, repeats))
        self.prompts = [int(p) for p in prompts]
        self.gaps = rng.exponential(1.0, len(prompts))  # arrivals at rate r: cumsum(gaps) / r
        self.draws = rng.random((len(prompts), 2))  # which two ranks each request is offered
        self.seed = seed
        # How the proxy weighs a rank: a P rank by the prompt tokens it holds; a colocated rank (`decoding` set) by
        # the requests it holds, its prompts and a mean of `decoding` decoding ones (inf: so many that the choice is
        # a coin toss).
        self.decoding: float | None = None

    def saturated_rate(self) -> float:
        """Requests/s one rank prefills when its queue never empties: the prompts in FIFO batches, back to back."""
        rank: RankQueue[int] = RankQueue(self.batch_tokens)
        for request, prompt in enumerate(self.prompts):
            rank.enqueue(request, prompt)
        busy = 0.0
        while rank.queue:
            busy += self._took(rank.start())
            rank.finish()
        return len(self.prompts) / busy

    @classmethod
    def fluid(cls, prompts: np.ndarray, seconds_per_token: float, repeats: int = 1,
              decoding: float = math.inf) -> "PrefillPool":
        """Ranks that prefill one prompt at a time at a steady `seconds_per_token`: a colocated rank, whose chunked
        prefill moves `chunk` prompt tokens per step of `chunk_step` seconds (as the simulator runs it). The proxy
        weighs such a rank by all the requests it holds: its prompts and a mean of `decoding` decoding ones."""
        def step_time(tokens: float, _squares: float, _count: int) -> float:
            return tokens * seconds_per_token

        pool = cls(None, None, 1, prompts, repeats, step_time=step_time)
        pool.decoding = decoding
        return pool

    def run(self, rate: float, ranks: int) -> PrefillRun:
        # Plain lists and locals in the loop: a plan plays millions of batches through it.
        arrivals = (np.cumsum(self.gaps) / rate).tolist()
        n = len(self.prompts)
        done = [0.0] * n
        duration = [0.0] * n
        pool: list[RankQueue[int]] = [RankQueue(self.batch_tokens) for _ in range(ranks)]
        ends = [0.0] * ranks  # when each rank's running batch finishes
        step_time = self.step_time

        def start(rank: int, now: float) -> None:
            batch = pool[rank].start()
            took = step_time(batch.tokens, batch.square_sum, len(batch.items))
            ends[rank] = now + took
            for item in batch.items:
                duration[item] = took

        def advance(rank: int, now: float) -> None:
            queue = pool[rank]
            while queue.running is not None and ends[rank] <= now:
                end = ends[rank]
                for item in queue.finish().items:
                    done[item] = end
                if queue.queue:
                    start(rank, end)

        # A rank's decoding requests come and go independently of its prompts: each count the proxy reads is a
        # fresh Poisson draw about their mean (the occupancy of a queue with no wait).
        decoding = self.decoding if self.decoding is not None and math.isfinite(self.decoding) else 0.0
        others = np.random.default_rng(self.seed + 1).poisson(decoding, (n, 2)).tolist()

        def held(rank: int) -> float:
            advance(rank, now)  # to the arrival being routed
            if self.decoding is None:
                return pool[rank].outstanding
            prompts = len(pool[rank].queue) + (pool[rank].running is not None)
            return prompts + others[request][int(rank == offer[1])]

        def offered(_ranks: int) -> tuple[int, int]:
            return offer

        rank_ids = range(ranks)
        coin_toss = self.decoding == math.inf
        for request, (now, offer, prompt) in enumerate(zip(arrivals, self._offers(ranks), self.prompts)):
            rank = offer[0] if coin_toss else two_choices(rank_ids, offered, held)
            advance(rank, now)  # a lone rank was not asked its load
            pool[rank].enqueue(request, prompt)
            if pool[rank].running is None:
                start(rank, now)
        for rank in range(ranks):
            advance(rank, float("inf"))
        keep = slice(int(n * WARMUP_SHARE), n)
        return PrefillRun((np.array(done) - np.array(arrivals))[keep], np.array(duration)[keep])

    def _took(self, batch: Batch) -> float:
        return self.step_time(batch.tokens, batch.square_sum, len(batch.items))

    def _offers(self, ranks: int) -> list[tuple[int, int]]:
        """The two different ranks each request is offered, from its fixed draws."""
        first = (self.draws[:, 0] * ranks).astype(int)
        second = (self.draws[:, 1] * (ranks - 1)).astype(int)
        return list(zip(first.tolist(), (second + (second >= first)).tolist()))
