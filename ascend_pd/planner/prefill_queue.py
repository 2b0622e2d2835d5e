"""How long prompts wait and run on a pool of prefill ranks, played out request by request.

The proxy sends each request to the lighter (by prompt tokens queued or running) of two random prefill ranks, and a
rank prefills its queue in FIFO batches of whole prompts up to its batch-token budget, so one step serves several
short prompts. Closed-form queues miss both effects (an M/G/2 queue waits three times longer than two-choice routing
over tens of ranks, and ignores batching, which on a small model multiplies capacity), so the planner plays the
prefill stage out exactly as the simulator does, on its own and with fixed random draws: the same draws at a higher
rate never finish sooner, which keeps a search over the rate monotone.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape

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

    def saturated_rate(self) -> float:
        """Requests/s one rank prefills when its queue never empties: the prompts in FIFO batches, back to back."""
        prompts, limit, busy, i = self.prompts, self.batch_tokens, 0.0, 0
        while i < len(prompts):
            tokens = squares = count = 0
            while i < len(prompts) and (not count or tokens + prompts[i] <= limit):
                tokens, squares, count, i = tokens + prompts[i], squares + prompts[i] ** 2, count + 1, i + 1
            busy += self.step_time(tokens, squares, count)
        return len(prompts) / busy

    @classmethod
    def fluid(cls, prompts: np.ndarray, seconds_per_token: float, repeats: int = 1) -> "PrefillPool":
        """Ranks that prefill one prompt at a time at a steady `seconds_per_token`: a colocated rank, whose chunked
        prefill moves `chunk` prompt tokens per step of `chunk_step` seconds (as the simulator runs it)."""
        def step_time(tokens: float, _squares: float, _count: int) -> float:
            return tokens * seconds_per_token

        return cls(None, None, 1, prompts, repeats, step_time=step_time)

    def run(self, rate: float, ranks: int) -> PrefillRun:
        arrivals = np.cumsum(self.gaps) / rate
        n = len(self.prompts)
        done = np.zeros(n)
        duration = np.zeros(n)
        queues: list[deque[int]] = [deque() for _ in range(ranks)]
        outstanding = [0] * ranks
        running: list[tuple[float, list[int], int] | None] = [None] * ranks
        prompts, limit, step_time = self.prompts, self.batch_tokens, self.step_time

        def start(rank: int, now: float) -> None:
            queue, batch, tokens, squares = queues[rank], [], 0, 0
            while queue and (not batch or tokens + prompts[queue[0]] <= limit):
                request = queue.popleft()
                batch.append(request)
                tokens += prompts[request]
                squares += prompts[request] ** 2
            took = step_time(tokens, squares, len(batch))
            running[rank] = (now + took, batch, tokens)
            duration[batch] = took

        def advance(rank: int, now: float) -> None:
            while running[rank] is not None and running[rank][0] <= now:
                end, batch, tokens = running[rank]
                done[batch] = end
                outstanding[rank] -= tokens
                running[rank] = None
                if queues[rank]:
                    start(rank, end)

        for request in range(n):
            now = float(arrivals[request])
            if ranks == 1:
                rank = 0
                advance(0, now)
            else:
                first = int(self.draws[request, 0] * ranks)
                second = int(self.draws[request, 1] * (ranks - 1))
                second += second >= first  # a second rank, different from the first
                advance(first, now)
                advance(second, now)
                rank = first if outstanding[first] <= outstanding[second] else second
            queues[rank].append(request)
            outstanding[rank] += prompts[request]
            if running[rank] is None:
                start(rank, now)
        for rank in range(ranks):
            advance(rank, float("inf"))
        keep = slice(int(n * WARMUP_SHARE), n)
        return PrefillRun((done - arrivals)[keep], duration[keep])
