"""The ZMQ side channel: a ROUTER server thread per worker and a retrying request client, carrying msgspec messages."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import zmq

from ascend_pd.connector import messages
from ascend_pd.connector.cpus import spread_threads, unpin_current_thread
from ascend_pd.errors import InputError

logger = logging.getLogger(__name__)

_POLL_MS = 100  # how often the server thread checks for shutdown
_MAX_BACKOFF_S = 2.0  # the doubling pause between tries stops growing here, so many retries stay a bounded wait


_context: zmq.Context | None = None
_context_pid = 0
_context_lock = threading.Lock()


def _connector_context() -> zmq.Context:
    """The connector's own ZMQ context (one per process), whose I/O thread may run on every usable CPU: one started
    by vLLM's main thread would share its pinned core (cpus.py)."""
    global _context, _context_pid
    with _context_lock:
        if _context is None or _context.closed or _context_pid != os.getpid():
            with spread_threads():
                _context = zmq.Context()
                _context.socket(zmq.REQ).close(linger=0)  # libzmq starts its I/O thread with the first socket
            _context_pid = os.getpid()
        return _context


class PeerUnreachable(Exception):
    """A side-channel peer did not answer; `silent_tries` counts the tries it had the whole timeout for."""

    def __init__(self, message: str, silent_tries: int = 0):
        super().__init__(message)
        self.silent_tries = silent_tries


class SideChannelServer:
    """Answers side-channel requests on tcp://host:port from one thread, until stop()."""

    def __init__(self, host: str, port: int, handler: Callable[[messages.Request], messages.Reply]):
        self.host, self.port = host, port
        self._handler = handler
        self._socket = _connector_context().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        try:
            self._socket.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as error:
            self._socket.close()
            raise InputError(f"cannot listen on side-channel port {port} of {host}: {error.strerror}",
                             file="kv_transfer_config", field="kv_port",
                             fix=f"free port {port} or move kv_port so kv_port .. kv_port + dp*tp - 1 is unused "
                                 "on this host (and outside other instances' ranges)") from error
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"ascend-pd-side-channel-{port}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        unpin_current_thread()
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        while not self._stopping.is_set():
            if not poller.poll(_POLL_MS):
                continue
            identity, _, payload = self._socket.recv_multipart()
            try:
                reply = self._handler(messages.decode_request(payload))
            except Exception as error:  # a bad message must not kill the channel; the peer hears why
                logger.exception("side channel %s: cannot handle a message", self.port)
                reply = messages.Refused(reason=f"{type(error).__name__}: {error}")
            self._socket.send_multipart([identity, b"", messages.encode(reply)])
        self._socket.close()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)


def request(host: str, port: int, message: messages.Request | Callable[[], messages.Request], *,
            timeout_s: float = 5.0, retries: int = 5, backoff_s: float = 0.2,
            deadline: float | None = None) -> messages.Reply:
    """Send one message and wait for the reply, retrying with a doubling backoff (at most _MAX_BACKOFF_S); raise
    PeerUnreachable at the end, or as soon as the monotonic `deadline` has passed (no try outlives it). A callable
    `message` is asked for the message afresh on every try (one that says how long its sender will wait)."""
    context = _connector_context()
    make = message if callable(message) else lambda: message
    name = type(make()).__name__
    delay = min(backoff_s, _MAX_BACKOFF_S)
    tries = silent = 0
    for attempt in range(retries + 1):
        wait_s = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if wait_s <= 0:
            break
        tries += 1
        silent += wait_s >= timeout_s
        socket = context.socket(zmq.REQ)  # a fresh REQ each try: a REQ that lost its reply cannot send again
        socket.setsockopt(zmq.LINGER, 0)
        try:
            socket.connect(f"tcp://{host}:{port}")
            socket.send(messages.encode(make()))
            if socket.poll(max(1, int(wait_s * 1000))):
                return messages.decode_reply(socket.recv())
        finally:
            socket.close()
        if attempt < retries:
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - time.monotonic()))
            logger.info("side channel %s:%d: no answer to %s, retrying in %.1fs", host, port, name, delay)
            time.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)
    raise PeerUnreachable(f"{host}:{port} did not answer {name} after {tries} "
                          f"{'try' if tries == 1 else 'tries'} of up to {timeout_s:g} s", silent_tries=silent)
