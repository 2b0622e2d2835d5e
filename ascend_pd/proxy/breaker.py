"""A circuit breaker per backend: consecutive failures open it; after a cool-down one success closes it again.
It also remembers when the backend was last heard from, so a health probe that times out can tell a backend busy
serving from one that is gone."""

from __future__ import annotations

import time


class CircuitBreaker:
    """Closed: routable. Open: not routable until `open_seconds` pass. Then half-open: routable again, and the next
    failure re-opens it at once while the next success closes it."""

    def __init__(self, failure_threshold: int, open_seconds: float, clock=time.monotonic):
        self.failure_threshold = failure_threshold
        self.open_seconds = open_seconds
        self._clock = clock
        self.consecutive_failures = 0
        self._open_until: float | None = None
        self._heard_at: float | None = None

    @property
    def state(self) -> str:
        if self._open_until is None:
            return "closed"
        return "open" if self._clock() < self._open_until else "half-open"

    def allows_requests(self) -> bool:
        return self._open_until is None or self._clock() >= self._open_until

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self._open_until = None
        self._heard_at = self._clock()

    def record_heard(self) -> None:
        """Bytes came from the backend (a streamed token): alive, whatever the breaker's state."""
        self._heard_at = self._clock()

    def heard_within(self, seconds: float) -> bool:
        return self._heard_at is not None and self._clock() - self._heard_at <= seconds

    def record_failure(self) -> None:
        self.consecutive_failures += 1
        if self._open_until is not None or self.consecutive_failures >= self.failure_threshold:
            self._open_until = self._clock() + self.open_seconds
