"""Least-loaded with power-of-two choices: sample two backends, take the lighter; ties alternate between them."""

from __future__ import annotations

import random
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
        first_load = (first.load_tokens, first.inflight)
        second_load = (second.load_tokens, second.inflight)
        if first_load != second_load:
            return first if first_load < second_load else second
        # a tie (every idle backend at low load) rotates, so no backend is the default choice
        self._turn += 1
        return (first, second)[self._turn % 2]
