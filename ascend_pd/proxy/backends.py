"""Live backends: load in tokens, in-flight count, drain flag and circuit breaker per endpoint, grouped by role."""

from __future__ import annotations

from typing import Collection

from yarl import URL

from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint, Role


class Backend:
    def __init__(self, endpoint: Endpoint, breaker: CircuitBreaker):
        self.endpoint = endpoint
        self.breaker = breaker
        self.load_tokens = 0
        self.inflight = 0
        self.draining = False
        self._targets: dict[str, URL] = {}

    def target(self, path: str) -> URL:
        """The parsed URL of `path` on this backend, kept: aiohttp would parse the string on every call."""
        url = self._targets.get(path)
        if url is None:
            url = self._targets[path] = URL(self.url + path)
        return url

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def role(self) -> Role:
        return self.endpoint.role

    def routable(self) -> bool:
        return not self.draining and self.breaker.allows_requests()

    def describe(self) -> dict:
        return {"url": self.url, "role": self.role, "name": self.endpoint.name,
                "state": "draining" if self.draining else self.breaker.state,
                "load_tokens": self.load_tokens, "inflight": self.inflight}

    def lease(self, tokens: int) -> "Lease":
        return Lease(self, tokens)

    def __repr__(self) -> str:
        return f"Backend({self.endpoint.name} {self.url} load={self.load_tokens} inflight={self.inflight})"


class Lease:
    """Load a request puts on a backend, from when it is routed until its last byte; release() is idempotent."""

    def __init__(self, backend: Backend, tokens: int):
        self.backend = backend
        self.tokens = tokens
        backend.load_tokens += tokens
        backend.inflight += 1
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self.backend.load_tokens -= self.tokens
            self.backend.inflight -= 1


class BackendPool:
    """All backends by URL. Removing one only stops new routing to it; leases already held still release."""

    def __init__(self, breaker_factory):
        self._breaker_factory = breaker_factory
        self._backends: dict[str, Backend] = {}

    def add(self, endpoint: Endpoint) -> Backend:
        backend = self._backends.get(endpoint.url)
        if backend is None or backend.endpoint != endpoint:
            backend = Backend(endpoint, self._breaker_factory())
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
