"""What a worker knows of its peers: their handshake metadata, fetched once, and which of them stopped answering."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.config import ConnectorConfig
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.connector.side_channel import PeerUnreachable

Address = tuple[str, int]


class Peers:
    """Side-channel messages to peers, bounded by the config's handshake settings and a caller's deadline. A peer
    that let a whole try go unanswered, or refused its CURVE handshake (a peer of another deployment), is marked
    down for peer_backoff_s: the requests behind it fail at once instead of each meeting the same wall. Messages go
    over CURVE connections under `key`; setting `stop` (the worker shuts down) ends every request in flight within a
    fraction of a second."""

    def __init__(self, config: ConnectorConfig, key: PeerKey, stop: threading.Event):
        self.config = config
        self.key, self.stop = key, stop
        self._down_until: dict[Address, float] = {}
        self._metadata: dict[Address, messages.AgentMetadata] = {}
        self._handshakes: defaultdict[Address, threading.Lock] = defaultdict(threading.Lock)
        self._lock = threading.Lock()

    def ask(self, host: str, port: int, message: messages.Request | Callable[[], messages.Request],
            deadline: float | None = None,
            even_if_down: bool = False) -> messages.Reply:
        """Send a message and wait for its reply; `even_if_down` tries a peer marked down too (a notice that lets
        it free blocks is worth a try off the request path)."""
        address = (host, port)
        with self._lock:
            until = self._down_until.get(address, 0.0)
        if until > time.monotonic() and not even_if_down:
            raise PeerUnreachable(f"{host}:{port} did not answer a moment ago; not asked again for "
                                  f"{until - time.monotonic():.1f} s (peer_backoff_s={self.config.peer_backoff_s:g})")
        try:
            reply = side_channel.request(host, port, message, key=self.key, retries=self.config.handshake_retries,
                                         timeout_s=self.config.handshake_timeout_s,
                                         backoff_s=self.config.handshake_backoff_s, deadline=deadline,
                                         stop=self.stop)
        except PeerUnreachable as error:
            if error.silent_tries:  # not only a try the caller's deadline cut short
                with self._lock:
                    self._down_until[address] = time.monotonic() + self.config.peer_backoff_s
            raise
        with self._lock:
            self._down_until.pop(address, None)
        return reply

    def metadata(self, host: str, port: int, deadline: float,
                 check: Callable[[messages.AgentMetadata], None]) -> messages.AgentMetadata:
        """A peer's metadata, fetched by one handshake that concurrent requests for it share; `check` vets it
        before it is kept."""
        address = (host, port)
        with self._lock:
            known = self._metadata.get(address)
            handshake = self._handshakes[address]
        if known is not None:
            return known
        if not handshake.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise PeerUnreachable(f"{host}:{port}: another request's handshake with it did not end in time")
        try:
            with self._lock:
                known = self._metadata.get(address)
            if known is not None:
                return known
            reply = self.ask(host, port, messages.GetMeta(), deadline)
            if isinstance(reply, messages.Refused):
                raise PeerRefused(f"{host}:{port} refused the handshake: {reply.reason}")
            if not isinstance(reply, messages.AgentMetadata):
                raise PeerRefused(f"{host}:{port} answered the handshake with {type(reply).__name__}")
            check(reply)
            with self._lock:
                self._metadata[address] = reply
            return reply
        finally:
            handshake.release()

    def forget(self, host: str, port: int) -> None:
        """Drop a peer's metadata after a failed transfer: a restarted peer has a new session and new addresses."""
        with self._lock:
            self._metadata.pop((host, port), None)


class PeerRefused(Exception):
    """A peer answered the handshake, but not with metadata this worker can use."""
