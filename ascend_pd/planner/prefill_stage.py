"""The prefill stage as the proxy and vLLM run it, the one model the planner's prefill pool (`prefill_queue.py`) and
the simulator both play out: the proxy offers each request to the lighter of two random ranks, and a rank prefills
its queue in FIFO batches of whole prompts up to its batch-token budget. Each caller keeps its own clock, random
draws and step times."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

Item = TypeVar("Item")
Rank = TypeVar("Rank")


@dataclass(slots=True)
class Batch(Generic[Item]):
    """The prompts of one prefill step: what a step time is computed from."""

    items: list[Item]
    tokens: int
    square_sum: int  # attention grows with each prompt's length squared


class RankQueue(Generic[Item]):
    """One prefill DP rank: a FIFO queue and at most one running batch of whole prompts, as many as fit in
    `batch_tokens` (at least one, however long)."""

    def __init__(self, batch_tokens: int):
        self.batch_tokens = batch_tokens
        self.queue: deque[tuple[Item, int]] = deque()
        self.outstanding = 0  # prompt tokens queued or running: what two-choice routing compares
        self.running: Batch[Item] | None = None

    def enqueue(self, item: Item, prompt: int) -> None:
        self.queue.append((item, prompt))
        self.outstanding += prompt

    def start(self) -> Batch[Item]:
        """Take the next batch off the queue and run it."""
        items, tokens, square_sum = [], 0, 0
        while self.queue and (not items or tokens + self.queue[0][1] <= self.batch_tokens):
            item, prompt = self.queue.popleft()
            items.append(item)
            tokens += prompt
            square_sum += prompt * prompt
        self.running = Batch(items, tokens, square_sum)
        return self.running

    def finish(self) -> Batch[Item]:
        """The running batch is done: its prompts leave the rank."""
        batch, self.running = self.running, None
        self.outstanding -= batch.tokens
        return batch


def two_choices(ranks: Sequence[Rank], draw: Callable[[int], Sequence[int]], load: Callable[[Rank], float]) -> Rank:
    """The proxy's least-loaded policy: of two different ranks, the indices `draw(len(ranks))` gives, the lighter by
    `load`, the first on a tie. A lone rank takes everything."""
    if len(ranks) == 1:
        return ranks[0]
    first, second = draw(len(ranks))
    first, second = ranks[first], ranks[second]
    return first if load(first) <= load(second) else second
