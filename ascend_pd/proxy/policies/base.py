"""What every routing policy implements: pick one backend from the routable candidates for one request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ascend_pd.proxy.backends import Backend


@dataclass(frozen=True)
class RouteRequest:
    """What a policy may look at: the prompt text (for prefix affinity) and its size in tokens."""

    prompt: str
    tokens: int


class Policy(Protocol):
    name: str

    def choose(self, candidates: Sequence[Backend], request: RouteRequest) -> Backend:
        """`candidates` is never empty; the policy returns one of them."""
