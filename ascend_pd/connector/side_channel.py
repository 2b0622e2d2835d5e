"""The ZMQ side channel: a ROUTER server thread per worker and a retrying request client, carrying msgspec messages
over CURVE connections only holders of the deployment's KV secret can open (peer_auth.py). A peer without it fails
the handshake before a byte of its messages is read; a failed handshake is counted and logged once per kind. The
server survives any bytes from a key holder too: a frame count, size or payload it does not expect is refused,
counted and logged once per peer address, never a reason to stop serving."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from ascend_pd.connector import messages
from ascend_pd.connector.cpus import spread_threads, unpin_current_thread
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.deploy.secrets import KV_SECRET_ENV
from ascend_pd.errors import InputError

logger = logging.getLogger(__name__)

_POLL_MS = 100  # how often the server thread, and a client waiting for a reply, check for shutdown
_STOP_GRACE_S = 0.5  # a reply on its way when its worker shuts down still lands; a silent peer is given up
_MAX_BACKOFF_S = 2.0  # the doubling pause between tries stops growing here, so many retries stay a bounded wait
# ZMQ_MAXMSGSIZE bounds a frame on the wire: a CURVE MESSAGE command adds its name, nonce, MAC and flags (33 bytes)
_MAX_FRAME_BYTES = messages.MAX_MESSAGE_BYTES + 33
_LOGGED_PEERS = 1024  # addresses whose refusal was logged; a flood from more is counted, not remembered
_WILDCARDS = {"", "*", "0.0.0.0", "::", "[::]"}
# How a connection's handshake can fail (without a ZAP handler, never EVENT_HANDSHAKE_FAILED_AUTH: peer_auth.py)
_HANDSHAKE_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
ANOTHER_DEPLOYMENT = (f"a peer of another deployment (another KV secret), or of a version without CURVE: every "
                      f"engine of a deployment needs the same {KV_SECRET_ENV} file")


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
    the whole timeout, or failing the CURVE handshake (it does not hold the deployment's KV secret)."""

    def __init__(self, message: str, silent_tries: int = 0):
        super().__init__(message)
        self.silent_tries = silent_tries


class Stopped(PeerUnreachable):
    """The asking worker is shutting down: the request ended between tries or in the middle of one."""


class SideChannelServer:
    """Answers side-channel requests on tcp://host:port from one thread, until stop(). Only peers holding `key`
    connect; every failed handshake, and every message of theirs that is not one request, calls `on_refused` (the
    worker counts it)."""

    def __init__(self, host: str, port: int, handler: Callable[[messages.Request], messages.Reply], key: PeerKey,
                 on_refused: Callable[[], None] = lambda: None):
        if host in _WILDCARDS:
            raise InputError(f"the side channel would listen on every interface ({host or 'no address'}): the "
                             "engine's own address is needed", file="environment", field="VLLM_HOST_IP",
                             fix="export VLLM_HOST_IP=<this node's address on the KV network> before starting the "
                                 "engine")
        self.host, self.port = host, port
        self._handler, self._on_refused = handler, on_refused
        self._logged: set[str] = set()
        self._socket = _connector_context().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, _MAX_FRAME_BYTES)
        key.serve_on(self._socket)
        # Failed handshakes never reach the ROUTER: its monitor is how the server sees them.
        self._failures = self._socket.get_monitor_socket(_HANDSHAKE_FAILED)
        try:
            self._socket.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as error:
            self._close()
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
        poller.register(self._failures, zmq.POLLIN)
        while not self._stopping.is_set():
            ready = dict(poller.poll(_POLL_MS))
            try:
                if self._failures in ready:  # one event a round: a flood of them does not starve requests
                    self._refuse_handshake()
                if self._socket in ready:
                    answer = self._answer(self._socket.recv_multipart(copy=False))
                    if answer is not None:
                        self._socket.send_multipart(answer)
            except Exception:  # a bug here must not end the channel for every later handoff
                logger.exception("side channel %s: cannot answer a message", self.port)
        self._close()

    def _close(self) -> None:
        self._socket.disable_monitor()
        self._failures.close()
        self._socket.close()

    def _refuse_handshake(self) -> None:
        """Count a failed handshake; libzmq's monitor does not say from which address, so each kind is logged
        once."""
        kind = _failed_handshake(recv_monitor_message(self._failures))
        self._refuse(kind, f"refused {kind}; later ones are counted (vllm:ascend_pd_side_channel_refused), not "
                           f"logged. A peer of this deployment needs the same {KV_SECRET_ENV} file")

    def _answer(self, frames: list[zmq.Frame]) -> list[bytes] | None:
        """The frames to send back for one received message, or None to drop it. A REQ peer's message is
        [identity, b"", payload]; any other shape has nowhere to be answered."""
        if len(frames) != 3 or frames[1].bytes != b"":
            address = frames[0].get("Peer-Address")
            self._refuse(address, f"refused a message of {len(frames) - 1} frame(s) from {address}, not a "
                                  f"side-channel request; later refusals of {address} are counted "
                                  "(vllm:ascend_pd_side_channel_refused), not logged")
            return None
        return [frames[0].bytes, b"", messages.encode(self._handle(frames[2].bytes))]

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

    def _refuse(self, source: str, line: str) -> None:
        """Count a refusal; log `line` the first time its source (an address, a kind of handshake failure) is
        refused, so a flood cannot flood the log."""
        self._on_refused()
        if source in self._logged or len(self._logged) > _LOGGED_PEERS:
            return
        self._logged.add(source)
        if len(self._logged) > _LOGGED_PEERS:
            logger.warning("side channel %s:%d: more than %d sources refused; further ones are counted "
                           "(vllm:ascend_pd_side_channel_refused), not logged", self.host, self.port, _LOGGED_PEERS)
            return
        logger.warning("side channel %s:%d: %s", self.host, self.port, line)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)


def _failed_handshake(event: dict) -> str:
    """What a failed handshake says of its peer, from its monitor event."""
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        return "a connection that closed during its handshake (a port probe, or a peer that gave up)"
    if event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return "a connection without CURVE (a peer without this deployment's KV secret, or not a side-channel peer)"
    if event["value"] == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return "a connection whose handshake needs another KV secret (a peer of another deployment)"
    return f"a connection with a malformed handshake (libzmq error {int(event['value']):#x})"


def request(host: str, port: int, message: messages.Request | Callable[[], messages.Request], *, key: PeerKey,
            timeout_s: float = 5.0, retries: int = 5, backoff_s: float = 0.2,
            deadline: float | None = None, stop: threading.Event | None = None) -> messages.Reply:
    """Send one message and wait for the reply, retrying with a doubling backoff (at most _MAX_BACKOFF_S); raise
    PeerUnreachable at the end, or as soon as the monotonic `deadline` has passed (no try outlives it), and Stopped
    within _STOP_GRACE_S of `stop` being set. A try whose CURVE handshake fails (the peer holds another KV secret than
    `key`) ends at once. A callable `message` is asked for the message afresh on every try (one that says how long
    its sender will wait)."""
    stop = stop or threading.Event()
    make = message if callable(message) else lambda: message
    name = type(make()).__name__
    delay = min(backoff_s, _MAX_BACKOFF_S)
    tries = silent = refused = 0
    for attempt in range(retries + 1):
        wait_s = timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())
        if wait_s <= 0:
            break
        if stop.is_set():
            raise Stopped(f"{name} to {host}:{port}: the worker is shutting down")
        tries += 1
        try:
            answer = _ask_once(host, port, key, messages.encode(make()), wait_s, stop, f"{name} to {host}:{port}")
        except _HandshakeFailed:
            refused += 1
            outcome = "handshake refused for"
        else:
            if answer is not None:
                return _decoded_reply(answer)
            silent += wait_s >= timeout_s
            outcome = "no answer to"
        if attempt < retries:
            if deadline is not None:
                delay = min(delay, max(0.0, deadline - time.monotonic()))
            logger.info("side channel %s:%d: %s %s, retrying in %.1fs", host, port, outcome, name, delay)
            if stop.wait(delay):
                raise Stopped(f"{name} to {host}:{port}: the worker is shutting down")
            delay = min(delay * 2, _MAX_BACKOFF_S)
    why = (f"; {refused} {'try' if refused == 1 else 'tries'} failed the CURVE handshake: {ANOTHER_DEPLOYMENT}"
           if refused else "")
    raise PeerUnreachable(f"{host}:{port} did not answer {name} after {tries} "
                          f"{'try' if tries == 1 else 'tries'} of up to {timeout_s:g} s{why}",
                          silent_tries=silent + refused)


class _HandshakeFailed(Exception):
    """The peer ended the connection in its CURVE handshake: it holds another KV secret, or no CURVE at all."""


def _ask_once(host: str, port: int, key: PeerKey, payload: bytes, wait_s: float, stop: threading.Event,
              what: str) -> bytes | None:
    """One try: the reply's bytes, or None when none came within wait_s."""
    socket = _connector_context().socket(zmq.REQ)  # a fresh REQ each try: one that lost its reply cannot send again
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, _MAX_FRAME_BYTES)
    key.connect_with(socket)
    # A handshake refused by the peer would otherwise look like silence; its monitor costs ~0.1 ms a try.
    failures = socket.get_monitor_socket(_HANDSHAKE_FAILED)
    try:
        socket.connect(f"tcp://{host}:{port}")
        socket.send(payload)
        return _answer_within(socket, failures, wait_s, stop, what)
    finally:
        socket.disable_monitor()
        failures.close()
        socket.close()


def _answer_within(socket: zmq.Socket, failures: zmq.Socket, wait_s: float, stop: threading.Event,
                   what: str) -> bytes | None:
    """The reply on `socket` within wait_s, in slices that let `stop` cut the wait to _STOP_GRACE_S; raise
    _HandshakeFailed as soon as `failures` (the socket's monitor) reports a failed handshake."""
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    poller.register(failures, zmq.POLLIN)
    ends = time.monotonic() + wait_s
    stopping = False
    while (left := ends - time.monotonic()) > 0:
        if stop.is_set() and not stopping:
            stopping = True
            ends = min(ends, time.monotonic() + _STOP_GRACE_S)
        ready = dict(poller.poll(max(1, int(min(left, _POLL_MS / 1000) * 1000))))
        if socket in ready:
            return socket.recv()
        if failures in ready:
            raise _HandshakeFailed
    if stopping:
        raise Stopped(f"{what}: the worker is shutting down")
    return None


def _decoded_reply(payload: bytes) -> messages.Reply:
    try:
        return messages.decode_reply(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:  # a peer of another version
        return messages.Refused(reason=f"cannot decode the reply: {error}")
