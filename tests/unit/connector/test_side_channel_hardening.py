"""The side channel against stray and hostile bytes: a peer without the deployment's KV secret fails its CURVE
handshake before the server reads a byte of its messages, and is counted; any frames, sizes and payloads leave the
server serving; refusals are counted and logged once."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
import time
from functools import partial
from types import SimpleNamespace

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from zmq.utils.monitor import recv_monitor_message

from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.config import parse_config
from ascend_pd.connector.connector import AscendPDConnector
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.connector.pull_worker import PullWorker
from ascend_pd.connector.stats_merged import AscendPDStats
from ascend_pd.deploy.secrets import KV_SECRET_ENV, new_secret
from ascend_pd.errors import InputError
from tests import fuzz
from tests.ports import free_port

KEY = PeerKey(new_secret())
META = messages.AgentMetadata(engine_id="prefill-0", tp_rank=0, tp_size=1, session="10.0.0.1:17000", block_size=16,
                              planes=[messages.PlaneInfo(1 << 40, 64, 4096, 4096, 4, False)])
MiB = 1 << 20


def until(condition, timeout_s: float = 10.0) -> bool:
    """Whether `condition` holds within timeout_s (generous: the machine may be busy)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Served:
    """A real server on loopback whose handler answers GetMeta and notes every message that reached it."""

    def __init__(self, key: PeerKey = KEY):
        self.port = free_port()
        self.reached: list[messages.Request] = []
        self.refused = 0
        self.server = side_channel.SideChannelServer("127.0.0.1", self.port, self._handle, key,
                                                     on_refused=self._count)

    def _handle(self, message):
        self.reached.append(message)
        return META if isinstance(message, messages.GetMeta) else messages.Ack()

    def _count(self):
        self.refused += 1

    def ask(self, key: PeerKey = KEY, **tries) -> messages.Reply:
        return side_channel.request("127.0.0.1", self.port, messages.GetMeta(), key=key,
                                    **{"timeout_s": 5.0, "retries": 0, **tries})

    def thread_alive(self) -> bool:
        return f"ascend-pd-side-channel-{self.port}" in {t.name for t in threading.enumerate()}


@pytest.fixture
def served():
    made = Served()
    yield made
    made.server.stop()


def zmq_socket(kind: int, port: int, key: PeerKey | None = None) -> zmq.Socket:
    """A ZMQ socket connected to the server: plain, or a CURVE client holding `key`'s keys."""
    sock = side_channel._connector_context().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if key is not None:
        key.connect_with(sock)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def plain_dealer_greeting() -> bytes:
    """What a plain ZMQ DEALER sends first (ZMTP 3.0, RFC 23): its greeting for the NULL mechanism, then READY."""
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32
    ready = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    return greeting + bytes([0x04, len(ready)]) + ready


def many_frame_message(frames: int, frame_bytes: int) -> bytes:
    """One ZMTP message of `frames` long frames (flag MORE on all but the last)."""
    header = struct.pack(">BQ", 0x03, frame_bytes)
    body = b"\x00" * frame_bytes
    return (header + body) * (frames - 1) + struct.pack(">BQ", 0x02, frame_bytes) + body


def test_a_plain_dealers_many_frame_message_is_never_read():
    """Reproduced: ZMQ_MAXMSGSIZE bounds a frame, so a DEALER's 8 frames of 4 MiB were all buffered before the
    ROUTER saw (and refused) the message: any number of frames, any memory. Now the server drops the connection at
    its greeting: the kernel's socket buffers are all a 32 MiB message gets into before the connection is reset."""
    served = Served()
    attack = plain_dealer_greeting() + many_frame_message(8, 4 * MiB)
    taken = 0
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as peer:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        try:
            while taken < len(attack):
                taken += peer.send(attack[taken:taken + MiB])
        except OSError:  # reset by the server (or, on a busy machine, it never read on: the same verdict)
            pass
    try:
        assert taken < 8 * MiB, f"the server took {taken / MiB:.1f} MiB of a 32 MiB message from a peer without the key"
        assert until(lambda: served.refused >= 1)
        assert served.reached == [] and served.ask() == META
    finally:
        served.server.stop()


def test_a_plain_zmq_dealer_is_refused_at_its_handshake_and_sends_nothing(served):
    dealer = side_channel._connector_context().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    events = dealer.get_monitor_socket(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)
    dealer.connect(f"tcp://127.0.0.1:{served.port}")
    with contextlib.suppress(zmq.Again):  # queued, unless the refusal already left the dealer without a peer
        dealer.send_multipart([b"\x00" * (4 * MiB)] * 8, flags=zmq.DONTWAIT)
    try:
        # libzmq sends no message before a handshake succeeds: the 32 MiB never leave the dealer
        assert events.poll(10_000) and recv_monitor_message(events)["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        assert until(lambda: served.refused >= 1)
    finally:
        dealer.disable_monitor()
        events.close()
        dealer.close()
    assert served.reached == [] and served.ask() == META


def test_a_dealer_with_another_deployments_keys_is_refused_at_its_handshake_and_counted(served):
    dealer = zmq_socket(zmq.DEALER, served.port, key=PeerKey(new_secret()))
    dealer.send_multipart([b"", messages.encode(messages.ReadDone(request_id="r", dst_rank=0))])
    try:
        assert until(lambda: served.refused >= 1)
        assert not dealer.poll(0)
    finally:
        dealer.close()
    assert served.reached == [] and served.ask() == META


def test_a_peer_without_the_secret_reaches_no_handler_and_hears_why_at_once(served):
    """Three tries of up to 30 s each: a refused handshake ends each try at once instead of waiting it out."""
    started = time.monotonic()
    with pytest.raises(side_channel.PeerUnreachable, match=f"3 tries failed the CURVE handshake.*{KV_SECRET_ENV}"):
        served.ask(key=PeerKey(new_secret()), timeout_s=30, retries=2, backoff_s=0.05)
    assert time.monotonic() - started < 30
    assert until(lambda: served.refused >= 3)
    assert served.reached == []


def test_one_garbage_frame_from_a_key_holders_dealer_leaves_the_server_answering(served):
    """Reproduced: a DEALER's single frame arrived as two at the ROUTER and ended the server thread for good."""
    dealer = zmq_socket(zmq.DEALER, served.port, key=KEY)
    dealer.send(b"garbage")
    try:
        assert until(lambda: served.refused >= 1)
    finally:
        dealer.close()
    assert served.thread_alive()
    assert served.ask() == META
    assert served.refused == 1 and served.reached == [messages.GetMeta()]


frames = st.lists(st.binary(max_size=256), min_size=1, max_size=5)
PEERS = {"plain": None, "another deployment": PeerKey(new_secret()), "this deployment": KEY}


@settings(max_examples=fuzz.examples(50), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from([zmq.DEALER, zmq.REQ]), parts=frames, peer=st.sampled_from(list(PEERS)))
def test_any_frames_from_any_socket_leave_the_server_answering_a_real_request(served, kind, parts, peer):
    sock = zmq_socket(kind, served.port, key=PEERS[peer])
    sock.setsockopt(zmq.SNDTIMEO, 5000)
    try:
        sock.send_multipart(parts)
    except zmq.Again:
        # a peer the server refused may find no connection to queue its message on, and its send would block for
        # ever: what this test asks is that the server still answers, below
        assert peer != "this deployment", "a key holder could not send"
    if peer == "this deployment" and kind == zmq.REQ and len(parts) == 1:  # the one shape that gets an answer
        assert sock.poll(5000)
        assert isinstance(messages.decode_reply(sock.recv()), (messages.Refused, messages.Ack, messages.AgentMetadata))
    sock.close()
    assert served.ask() == META


def test_a_message_over_the_size_cap_drops_its_sender_and_one_at_the_cap_is_read(served):
    """Both from a key holder: MAX_MESSAGE_BYTES + 1 ends the sender's connection (no cap would keep it), while
    MAX_MESSAGE_BYTES itself still reaches the server (it is no message, so it is refused with a reason)."""
    dealer = zmq_socket(zmq.DEALER, served.port, key=KEY)
    dropped = dealer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    dealer.send_multipart([b"", b"\x00" * (messages.MAX_MESSAGE_BYTES + 1)])
    try:
        assert dropped.poll(10_000), "a message over the cap did not drop its sender's connection"
    finally:
        dealer.disable_monitor()
        dropped.close()
        dealer.close()
    req = zmq_socket(zmq.REQ, served.port, key=KEY)
    req.send(b"\x00" * messages.MAX_MESSAGE_BYTES)
    try:
        assert req.poll(10_000)
        reply = messages.decode_reply(req.recv())
    finally:
        req.close()
    assert isinstance(reply, messages.Refused) and "cannot decode" in reply.reason
    assert served.reached == [] and served.thread_alive()
    assert served.ask() == META


def test_the_largest_real_message_fits_under_the_cap():
    """4096 cache planes and 2**21 block ids, every number at its widest: what MAX_MESSAGE_BYTES is sized for."""
    plane = messages.PlaneInfo(2**64 - 1, 2**32 - 1, 2**63, 2**32 - 1, 2**16, False)
    meta = messages.AgentMetadata(engine_id="e" * 256, tp_rank=1023, tp_size=1024, session="h" * 300,
                                  block_size=1024, planes=[plane] * 4096)
    ready = messages.PushReady(transfer_id="f" * 64, block_ids=[2**32 - 1] * (1 << 21), first_block=2**31,
                               dst=meta, dst_host="h" * 255, dst_port=65535, expires_in_s=1e9)
    assert len(messages.encode(ready)) < messages.MAX_MESSAGE_BYTES


def test_a_flood_of_refused_handshakes_is_logged_once_and_counted_in_full(served, caplog):
    caplog.set_level(logging.WARNING, logger=side_channel.logger.name)
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as peer:
            peer.sendall(plain_dealer_greeting())
            with contextlib.suppress(ConnectionResetError):
                while peer.recv(4096):  # until the server hangs up
                    pass
    assert until(lambda: served.refused >= 50)
    assert served.refused == 50
    lines = [r.getMessage() for r in caplog.records if r.name == side_channel.logger.name]
    assert len(lines) == 1 and "without CURVE" in lines[0] and KV_SECRET_ENV in lines[0]


def test_refusals_reach_the_engines_metrics():
    config = parse_config("kv_producer", "prefill-0", 26400, {"ascend_pd_shapes": {"prefill": {"tp_size": 1},
                                                                                  "decode": {"tp_size": 1}}})
    worker = PullWorker(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)
    port = free_port()
    counted = []
    server = side_channel.SideChannelServer("127.0.0.1", port, worker._handle, worker.key,
                                            on_refused=lambda: counted.append(worker._refused()))
    try:
        with pytest.raises(side_channel.PeerUnreachable):
            side_channel.request("127.0.0.1", port, messages.ReadDone(request_id="r", dst_rank=0),
                                 key=PeerKey(new_secret()), timeout_s=5, retries=2, backoff_s=0.01)
        assert until(lambda: len(counted) >= 3)
    finally:
        server.stop()
        worker.shutdown()
    registry = CollectorRegistry()
    metric_types = {kind: partial(kind, registry=registry) for kind in (Gauge, Counter, Histogram)}
    prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                ["model_name", "engine"], {0: ["tiny", "0"]})
    prom.observe(AscendPDStats(data=worker.take_stats().data).data, engine_idx=0)
    labels = {"model_name": "tiny", "engine": "0"}
    assert registry.get_sample_value("vllm:ascend_pd_side_channel_refused_total", labels) == len(counted)
    assert "r" not in worker.served  # the forged ReadDone freed nothing


def test_the_side_channel_never_listens_on_every_interface():
    with pytest.raises(InputError) as error:
        side_channel.SideChannelServer("0.0.0.0", free_port(), lambda m: messages.Ack(), KEY)
    assert error.value.field == "VLLM_HOST_IP"


def test_a_pyzmq_without_curve_is_refused_with_what_to_install(monkeypatch):
    """Without CURVE the side channel would be open to anyone: refuse to start rather than serve unauthenticated."""
    monkeypatch.setattr(zmq, "has", lambda capability: capability != "curve")
    with pytest.raises(InputError) as error:
        PeerKey(new_secret())
    assert error.value.field == "pyzmq" and "pip install" in error.value.fix


def test_a_worker_without_the_secret_refuses_to_start_naming_the_variable(monkeypatch):
    monkeypatch.delenv(KV_SECRET_ENV)
    config = parse_config("kv_consumer", "decode-0", 26410, {"ascend_pd_shapes": {"prefill": {"tp_size": 1},
                                                                                 "decode": {"tp_size": 1}}})
    with pytest.raises(InputError) as error:
        PullWorker(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)
    assert error.value.field == KV_SECRET_ENV and "kv.key" in error.value.fix


def test_a_secret_file_others_can_read_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "kv.key"
    path.write_text(new_secret())
    path.chmod(0o644)
    monkeypatch.setenv(KV_SECRET_ENV, str(path))
    with pytest.raises(InputError, match="open to other users"):
        PeerKey.from_env()
