"""Live backends: load in tokens, in-flight count, engine load reading, drain flag and circuit breaker per endpoint,
grouped by role."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection

from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint, Role

if TYPE_CHECKING:
    from ascend_pd.proxy.siblings import SharedLoad

# What a request the engine runs for another proxy is worth before this proxy has seen any prompt on the role. Only
# the first routing decision on a role can see it, and then this proxy's own load is zero on every backend, so only
# the order of the foreign request counts matters, which any positive value keeps.
FALLBACK_PROMPT_TOKENS = 1.0


class PromptMean:
    """Mean prompt tokens per request this proxy routed: exact over the first `window` requests, then an exponential
    average over about that many, so it follows a workload that changes."""

    def __init__(self, window: int = 256):
        self._window = window
        self._count = 0
        self.value = FALLBACK_PROMPT_TOKENS

    def add(self, tokens: int) -> None:
        self._count = min(self._count + 1, self._window)
        self.value += (tokens - self.value) / self._count


@dataclass(frozen=True)
class EngineReading:
    """One poll of the engine's /metrics, with this proxy's own requests on the backend at that moment: the
    difference is what other proxies (or clients calling the engine directly) have put there."""

    requests: int  # running + waiting, over every engine core behind the endpoint
    kv_usage: float  # 0..1, the fullest engine core
    own_requests: int
    read_at: float  # time.monotonic()
    fresh_until: float  # after this the reading says nothing about now


class Backend:
    """`load_tokens` and `inflight` are this worker process's; with `shared` (the worker processes of one proxy),
    own_tokens() and own_requests() are the whole proxy's."""

    def __init__(self, endpoint: Endpoint, breaker: CircuitBreaker, prompt_mean: PromptMean | None = None,
                 shared: SharedLoad | None = None):
        self.endpoint = endpoint
        self.breaker = breaker
        self.load_tokens = 0
        self.inflight = 0
        self.draining = False
        self._engine: EngineReading | None = None
        self.prompt_mean = prompt_mean if prompt_mean is not None else PromptMean()  # shared by a role in a pool
        self._shared = shared
        self._slot = shared.slot(endpoint.url) if shared is not None else 0

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def role(self) -> Role:
        return self.endpoint.role

    def routable(self) -> bool:
        return not self.draining and self.breaker.allows_requests()

    # This proxy's own load, the one place that says what "own" is: the policies and engine readings go through these
    def own_tokens(self) -> int:
        return self.load_tokens if self._shared is None else self._shared.totals(self._slot)[0]

    def own_requests(self) -> int:
        return self.inflight if self._shared is None else self._shared.totals(self._slot)[1]

    def add_load(self, tokens: int, requests: int) -> None:
        self.load_tokens += tokens
        self.inflight += requests
        if self._shared is not None:
            self._shared.add(self._slot, tokens, requests)

    def read_engine(self, requests: int, kv_usage: float, fresh_for: float, now: float | None = None) -> None:
        """Record the engine's load as its /metrics says now; it counts in routing for `fresh_for` seconds. With
        worker processes, one worker polls and the reading goes to the shared table for all of them."""
        now = time.monotonic() if now is None else now
        reading = EngineReading(requests, kv_usage, self.own_requests(), now, now + fresh_for)
        if self._shared is None:
            self._engine = reading
        else:
            self._shared.write_reading(self._slot, (reading.requests, reading.kv_usage, reading.own_requests,
                                                    reading.read_at, reading.fresh_until))

    @property
    def engine(self) -> EngineReading | None:
        """The last reading of the engine's load, this worker's own or the one the polling worker shared."""
        if self._shared is None:
            return self._engine
        shared = self._shared.reading(self._slot)
        if shared is None:
            return None
        requests, kv_usage, own_requests, read_at, fresh_until = shared
        return EngineReading(int(requests), kv_usage, int(own_requests), read_at, fresh_until)

    def foreign_requests(self, now: float | None = None) -> int:
        """Requests the engine held at its last fresh reading beyond this proxy's own at that moment."""
        engine = self.engine
        if engine is None or (time.monotonic() if now is None else now) > engine.fresh_until:
            return 0
        return max(0, engine.requests - engine.own_requests)

    def routing_load(self, now: float | None = None) -> float:
        """What policies compare, in prompt tokens: this proxy's own in flight now, plus the other proxies' requests
        valued at this proxy's mean prompt (they are unseen, and on the same service likely alike)."""
        return self.own_tokens() + self.foreign_requests(now) * self.prompt_mean.value

    def routing_requests(self, now: float | None = None) -> int:
        """Requests on the backend as routing sees them: the tie-break when token loads are equal."""
        return self.own_requests() + self.foreign_requests(now)

    def describe(self) -> dict:
        engine = self.engine
        reading = None if engine is None else {
            "requests": engine.requests, "kv_usage": engine.kv_usage, "own_requests": engine.own_requests,
            "age_seconds": round(time.monotonic() - engine.read_at, 3)}
        return {"url": self.url, "role": self.role, "name": self.endpoint.name,
                "state": "draining" if self.draining else self.breaker.state,
                "load_tokens": self.load_tokens, "inflight": self.inflight, "engine": reading,
                "proxy_inflight": self.own_requests(),  # every worker's: what a drain waits for
                "routing_load": self.routing_load()}

    def lease(self, tokens: int) -> "Lease":
        return Lease(self, tokens)

    def __repr__(self) -> str:
        return f"Backend({self.endpoint.name} {self.url} load={self.load_tokens} inflight={self.inflight})"


class Lease:
    """Load a request puts on a backend, from when it is routed until its last byte; release() is idempotent."""

    def __init__(self, backend: Backend, tokens: int):
        self.backend = backend
        self.tokens = tokens
        backend.add_load(tokens, 1)
        backend.prompt_mean.add(tokens)
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.backend.add_load(-self.tokens, -1)


class BackendPool:
    """All backends by URL. Removing one only stops new routing to it; leases already held still release."""

    def __init__(self, breaker_factory, shared_load: SharedLoad | None = None):
        self._breaker_factory = breaker_factory
        self._shared_load = shared_load
        self._backends: dict[str, Backend] = {}
        # per role, not per backend: a backend this proxy has not used yet may be just where other proxies' load is
        self._prompt_means: dict[Role, PromptMean] = {}

    def add(self, endpoint: Endpoint) -> Backend:
        backend = self._backends.get(endpoint.url)
        if backend is None or backend.endpoint != endpoint:
            mean = self._prompt_means.setdefault(endpoint.role, PromptMean())
            backend = Backend(endpoint, self._breaker_factory(), mean, self._shared_load)
            self._backends[endpoint.url] = backend
        backend.draining = False
        return backend

    def get(self, url: str) -> Backend | None:
        return self._backends.get(url)

    def remove(self, url: str) -> Backend | None:
        return self._backends.pop(url, None)

    def all(self) -> list[Backend]:
        return list(self._backends.values())

    def has_candidate(self, role: Role) -> bool:
        return any(b.role == role and b.routable() for b in self._backends.values())

    def by_role(self, role: Role) -> list[Backend]:
        return [b for b in self._backends.values() if b.role == role]

    def candidates(self, role: Role, exclude: Collection[str] = ()) -> list[Backend]:
        return [b for b in self._backends.values() if b.role == role and b.url not in exclude and b.routable()]
