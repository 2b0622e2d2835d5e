"""Uniform random choice among the routable backends."""

from __future__ import annotations

import random
from typing import Sequence

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.policies.base import RouteRequest


class RandomChoice:
    name = "random"

    def __init__(self, rng: random.Random | None = None):
        self._rng = rng or random.Random()

    def choose(self, candidates: Sequence[Backend], request: RouteRequest) -> Backend:
        return self._rng.choice(list(candidates))
