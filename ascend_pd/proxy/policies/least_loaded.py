"""Least-loaded with power-of-two choices: sample two backends, take the lighter; ties alternate between them.
Load is Backend.routing_load: this proxy's own tokens in flight plus what the engine reports beyond them."""

from __future__ import annotations

import random
import time
from typing import Sequence

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.policies.base import RouteRequest


class LeastLoaded:
    name = "least-loaded"

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()
        self._turn = 0

    def choose(self, candidates: Sequence[Backend], request: RouteRequest) -> Backend:
        if len(candidates) == 1:
            return candidates[0]
        # with two candidates the sample is both of them: skip the random draw (the bench's 2 P + 2 D, and a
        # common small deployment)
        first, second = candidates if len(candidates) == 2 else self._rng.sample(list(candidates), 2)
        now = time.monotonic()
        first_load = (first.routing_load(now), first.routing_requests(now))
        second_load = (second.routing_load(now), second.routing_requests(now))
        if first_load != second_load:
            return first if first_load < second_load else second
        # a tie (every idle backend at low load) rotates, so no backend is the default choice
        self._turn += 1
        return (first, second)[self._turn % 2]
