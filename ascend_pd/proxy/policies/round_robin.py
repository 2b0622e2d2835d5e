"""Round robin over the routable backends, in the order they were added."""

from __future__ import annotations

from typing import Sequence

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.policies.base import RouteRequest


class RoundRobin:
    name = "round-robin"

    def __init__(self):
        self._next = 0

    def choose(self, candidates: Sequence[Backend], request: RouteRequest) -> Backend:
        chosen = candidates[self._next % len(candidates)]
        self._next += 1
        return chosen
