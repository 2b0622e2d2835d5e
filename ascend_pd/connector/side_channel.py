"""The ZMQ side channel: a ROUTER server thread per worker and a retrying request client, carrying msgspec messages
sealed with the deployment's KV secret (peer_auth.py). The server survives any bytes: a frame count, size or payload
it does not expect is refused, counted and logged once per peer address, never a reason to stop serving."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import msgspec
import zmq

from ascend_pd.connector import messages
from ascend_pd.connector.cpus import spread_threads, unpin_current_thread
from ascend_pd.connector.peer_auth import MAC_BYTES, PeerKey
from ascend_pd.deploy.secrets import KV_SECRET_ENV
from ascend_pd.errors import InputError

logger = logging.getLogger(__name__)

_POLL_MS = 100  # how often the server thread, and a client waiting for a reply, check for shutdown
_STOP_GRACE_S = 0.5  # a reply on its way when its worker shuts down still lands; a silent peer is given up
_MAX_BACKOFF_S = 2.0  # the doubling pause between tries stops growing here, so many retries stay a bounded wait
_MAX_FRAME_BYTES = messages.MAX_MESSAGE_BYTES + MAC_BYTES
_LOGGED_PEERS = 1024  # addresses whose refusal was logged; a flood from more is counted, not remembered
_WILDCARDS = {"", "*", "0.0.0.0", "::", "[::]"}
NOT_AUTHENTICATED = "not sealed with this deployment's KV secret"


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
    """A side-channel peer did not answer; `silent_tries` counts the tries it gave no usable answer in: silent for
    the whole timeout, or answering without the deployment's KV secret."""

    def __init__(self, message: str, silent_tries: int = 0):
        super().__init__(message)
        self.silent_tries = silent_tries


class Stopped(PeerUnreachable):
    """The asking worker is shutting down: the request ended between tries or in the middle of one."""


class SideChannelServer:
    """Answers side-channel requests on tcp://host:port from one thread, until stop(). Only requests sealed with
    `key` reach `handler`; anything else calls `on_refused` (the worker counts it)."""

    def __init__(self, host: str, port: int, handler: Callable[[messages.Request], messages.Reply], key: PeerKey,
                 on_refused: Callable[[], None] = lambda: None):
        if host in _WILDCARDS:
            raise InputError(f"the side channel would listen on every interface ({host or 'no address'}): the "
                             "engine's own address is needed", file="environment", field="VLLM_HOST_IP",
                             fix="export VLLM_HOST_IP=<this node's address on the KV network> before starting the "
                                 "engine")
        self.host, self.port = host, port
        self._handler, self._key, self._on_refused = handler, key, on_refused
        self._logged: set[str] = set()
        self._socket = _connector_context().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, _MAX_FRAME_BYTES)
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
            try:
                answer = self._answer(self._socket.recv_multipart(copy=False))
                if answer is not None:
                    self._socket.send_multipart(answer)
            except Exception:  # a bug here must not end the channel for every later handoff
                logger.exception("side channel %s: cannot answer a message", self.port)
        self._socket.close()

    def _answer(self, frames: list[zmq.Frame]) -> list[bytes] | None:
        """The frames to send back for one received message, or None to drop it. A REQ peer's message is
        [identity, b"", payload]; any other shape has nowhere to be answered."""
        address = frames[0].get("Peer-Address")
        if len(frames) != 3 or frames[1].bytes != b"":
            self._refuse(address, f"a message of {len(frames) - 1} frame(s), not a side-channel request")
            return None
        payload = self._key.open_request(frames[2].bytes)
        if payload is None:
            self._refuse(address, f"a message {NOT_AUTHENTICATED}")
            reply = messages.Refused(reason=NOT_AUTHENTICATED)  # no data: says only that a key is missing
        else:
            reply = self._handle(payload)
        return [frames[0].bytes, b"", self._key.seal_reply(messages.encode(reply))]

    def _handle(self, payload: bytes) -> messages.Reply:
        try:
            message = messages.decode_request(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:  # a peer of another version
            return messages.Refused(reason=f"cannot decode the request: {error}")
        try:
            return self._handler(message)
        except Exception as error:  # a bad message must not kill the channel; the peer hears why
            logger.exception("side channel %s: cannot handle a message", self.port)
            return messages.Refused(reason=f"{type(error).__name__}: {error}")

    def _refuse(self, address: str, what: str) -> None:
        """Count a refusal; log it the first time its address is refused, so a flood cannot flood the log."""
        self._on_refused()
        if address in self._logged or len(self._logged) > _LOGGED_PEERS:
            return
        self._logged.add(address)
        if len(self._logged) > _LOGGED_PEERS:
            logger.warning("side channel %s:%d: more than %d addresses refused; further ones are counted "
                           "(vllm:ascend_pd_side_channel_refused), not logged", self.host, self.port, _LOGGED_PEERS)
            return
        logger.warning("side channel %s:%d: refused %s from %s; later refusals of %s are counted "
                       "(vllm:ascend_pd_side_channel_refused), not logged. A peer of this deployment needs the "
                       "same %s file", self.host, self.port, what, address, address, KV_SECRET_ENV)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)


def request(host: str, port: int, message: messages.Request | Callable[[], messages.Request], *, key: PeerKey,
            timeout_s: float = 5.0, retries: int = 5, backoff_s: float = 0.2,
            deadline: float | None = None, stop: threading.Event | None = None) -> messages.Reply:
    """Send one message and wait for the reply, retrying with a doubling backoff (at most _MAX_BACKOFF_S); raise
    PeerUnreachable at the end, or as soon as the monotonic `deadline` has passed (no try outlives it), and Stopped
    within _STOP_GRACE_S of `stop` being set. A reply not sealed with `key` counts as no answer. A callable `message` is
    asked for the message afresh on every try (one that says how long its sender will wait)."""
    context = _connector_context()
    stop = stop or threading.Event()
    make = message if callable(message) else lambda: message
    name = type(make()).__name__
    delay = min(backoff_s, _MAX_BACKOFF_S)
    tries = silent = unsealed = 0
    for attempt in range(retries + 1):
        wait_s = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if wait_s <= 0:
            break
        if stop.is_set():
            raise Stopped(f"{name} to {host}:{port}: the worker is shutting down")
        tries += 1
        socket = context.socket(zmq.REQ)  # a fresh REQ each try: a REQ that lost its reply cannot send again
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, _MAX_FRAME_BYTES)
        try:
            socket.connect(f"tcp://{host}:{port}")
            socket.send(key.seal_request(messages.encode(make())))
            answer = _answer_within(socket, wait_s, stop, f"{name} to {host}:{port}")
        finally:
            socket.close()
        if answer is None:
            silent += wait_s >= timeout_s
        elif (payload := key.open_reply(answer)) is not None:
            return _decoded_reply(payload)
        else:
            unsealed += 1
        if attempt < retries:
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - time.monotonic()))
            logger.info("side channel %s:%d: no answer to %s, retrying in %.1fs", host, port, name, delay)
            if stop.wait(delay):
                raise Stopped(f"{name} to {host}:{port}: the worker is shutting down")
            delay = min(delay * 2, _MAX_BACKOFF_S)
    why = (f"; {unsealed} answer(s) were {NOT_AUTHENTICATED}: every engine of a deployment needs the same "
           f"{KV_SECRET_ENV} file") if unsealed else ""
    raise PeerUnreachable(f"{host}:{port} did not answer {name} after {tries} "
                          f"{'try' if tries == 1 else 'tries'} of up to {timeout_s:g} s{why}",
                          silent_tries=silent + unsealed)


def _answer_within(socket: zmq.Socket, wait_s: float, stop: threading.Event, what: str) -> bytes | None:
    """The reply on `socket` within wait_s, in slices that let `stop` cut the wait to _STOP_GRACE_S."""
    ends = time.monotonic() + wait_s
    stopping = False
    while (left := ends - time.monotonic()) > 0:
        if stop.is_set() and not stopping:
            stopping = True
            ends = min(ends, time.monotonic() + _STOP_GRACE_S)
        if socket.poll(max(1, int(min(left, _POLL_MS / 1000) * 1000))):
            return socket.recv()
    if stopping:
        raise Stopped(f"{what}: the worker is shutting down")
    return None


def _decoded_reply(payload: bytes) -> messages.Reply:
    try:
        return messages.decode_reply(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:  # a peer of another version
        return messages.Refused(reason=f"cannot decode the reply: {error}")
