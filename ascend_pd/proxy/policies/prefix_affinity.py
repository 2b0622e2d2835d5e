"""Prefix affinity: send a prompt where its longest known prefix went, unless that backend is overloaded."""

from __future__ import annotations

import time
from typing import Sequence

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.policies.base import RouteRequest
from ascend_pd.proxy.policies.least_loaded import LeastLoaded
from ascend_pd.proxy.prefix_index import PrefixIndex


class PrefixAffinity:
    """Follow the prefix index when the matching backend carries at most `balance_tokens` more routing load than the
    lightest candidate; otherwise fall back to least-loaded. Every choice is recorded in the index."""

    name = "prefix-affinity"

    def __init__(self, index: PrefixIndex | None = None, balance_tokens: int = 8192,
                 fallback: LeastLoaded | None = None):
        self.index = index if index is not None else PrefixIndex()
        self.balance_tokens = balance_tokens
        self._fallback = fallback if fallback is not None else LeastLoaded()

    def choose(self, candidates: Sequence[Backend], request: RouteRequest) -> Backend:
        by_url = {b.url: b for b in candidates}
        match = self.index.longest_match(request.prompt, by_url.keys())
        if match is not None and self._balanced(by_url[match], candidates):
            chosen = by_url[match]
        else:
            chosen = self._fallback.choose(candidates, request)
        self.index.record(request.prompt, chosen.url)
        return chosen

    def _balanced(self, backend: Backend, candidates: Sequence[Backend]) -> bool:
        now = time.monotonic()
        lightest = min(b.routing_load(now) for b in candidates)
        return backend.routing_load(now) - lightest <= self.balance_tokens
