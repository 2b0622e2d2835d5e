"""The side channel against stray and hostile bytes: any frames, sizes and payloads leave it serving; only holders of
the deployment's KV secret reach a handler; refusals are counted and logged once per address."""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from types import SimpleNamespace

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.config import parse_config
from ascend_pd.connector.connector import AscendPDConnector
from ascend_pd.connector.peer_auth import MAC_BYTES, PeerKey
from ascend_pd.connector.pull_worker import PullWorker
from ascend_pd.connector.stats_merged import AscendPDStats
from ascend_pd.deploy.secrets import KV_SECRET_ENV, new_secret
from ascend_pd.errors import InputError
from tests.ports import free_port

KEY = PeerKey(new_secret())
META = messages.AgentMetadata(engine_id="prefill-0", tp_rank=0, tp_size=1, session="10.0.0.1:17000", block_size=16,
                              planes=[messages.PlaneInfo(1 << 40, 64, 4096, 4096, 4, False)])


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
                                    **{"timeout_s": 2.0, "retries": 0, **tries})

    def thread_alive(self) -> bool:
        return f"ascend-pd-side-channel-{self.port}" in {t.name for t in threading.enumerate()}


@pytest.fixture
def served():
    made = Served()
    yield made
    made.server.stop()


def raw_socket(kind: int, port: int) -> zmq.Socket:
    sock = side_channel._connector_context().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return sock


def test_one_garbage_frame_from_a_dealer_leaves_the_server_answering(served):
    """Reproduced: a DEALER's single frame arrived as two at the ROUTER and ended the server thread for good."""
    dealer = raw_socket(zmq.DEALER, served.port)
    dealer.send(b"garbage")
    time.sleep(0.3)
    dealer.close()
    assert served.thread_alive()
    assert served.ask() == META
    assert served.refused == 1


frames = st.lists(st.binary(max_size=256), min_size=1, max_size=5)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from([zmq.DEALER, zmq.REQ]), parts=frames, sealed=st.booleans())
def test_any_frames_from_any_socket_leave_the_server_answering_a_real_request(served, kind, parts, sealed):
    if sealed:  # a key holder's bytes that are no message: past the MAC, into the decoder
        parts = [KEY.seal_request(part) for part in parts]
    sock = raw_socket(kind, served.port)
    sock.send_multipart(parts)
    if kind == zmq.REQ and len(parts) == 1:  # the one shape a REQ peer gets an answer to
        assert sock.poll(2000)
        reply = KEY.open_reply(sock.recv())
        assert reply is not None
        assert isinstance(messages.decode_reply(reply), (messages.Refused, messages.Ack, messages.AgentMetadata))
    sock.close()
    assert served.ask() == META


def test_a_message_over_the_size_cap_drops_its_sender_and_the_server_goes_on(served):
    dealer = raw_socket(zmq.DEALER, served.port)
    dealer.send_multipart([b"", KEY.seal_request(b"\x00" * (messages.MAX_MESSAGE_BYTES + 1))])
    assert not dealer.poll(500)  # dropped unread: not even a refusal comes back
    dealer.close()
    assert served.reached == [] and served.thread_alive()
    assert served.ask() == META


def test_the_largest_real_message_fits_under_the_cap():
    """4096 cache planes and 2**21 block ids, every number at its widest: what MAX_MESSAGE_BYTES is sized for."""
    plane = messages.PlaneInfo(2**64 - 1, 2**32 - 1, 2**63, 2**32 - 1, 2**16, False)
    meta = messages.AgentMetadata(engine_id="e" * 256, tp_rank=1023, tp_size=1024, session="h" * 300,
                                  block_size=1024, planes=[plane] * 4096)
    ready = messages.PushReady(transfer_id="f" * 64, block_ids=[2**32 - 1] * (1 << 21), first_block=2**31,
                               dst=meta, dst_host="h" * 255, dst_port=65535, expires_in_s=1e9)
    assert len(messages.encode(ready)) + MAC_BYTES < messages.MAX_MESSAGE_BYTES


def test_a_peer_without_the_secret_reaches_no_handler_learns_nothing_and_hears_why():
    served = Served()
    try:
        started = time.monotonic()
        with pytest.raises(side_channel.PeerUnreachable, match=f"not sealed with .* KV secret.*{KV_SECRET_ENV}"):
            served.ask(key=PeerKey(new_secret()), retries=2, backoff_s=0.05)
        assert time.monotonic() - started < 1  # an answer it cannot trust ends each try at once, no timeout
        readdone = PeerKey(new_secret()).seal_request(messages.encode(messages.ReadDone(request_id="r", dst_rank=0)))
        req = raw_socket(zmq.REQ, served.port)
        req.send(readdone)
        assert req.poll(2000)
        raw = req.recv()
        req.close()
    finally:
        served.server.stop()
    assert served.reached == []  # neither GetMeta nor ReadDone got to the handler
    assert served.refused == 4
    # the answer carries no metadata: a refusal that only says a key is missing
    assert messages.decode_reply(raw[MAC_BYTES:]) == messages.Refused(reason=side_channel.NOT_AUTHENTICATED)


def test_a_sealed_reply_replayed_as_a_request_is_refused(served):
    """Requests and replies are sealed under different labels: a reply seen on the wire cannot be sent back."""
    replayed = KEY.seal_reply(messages.encode(messages.ReadDone(request_id="r", dst_rank=0)))
    req = raw_socket(zmq.REQ, served.port)
    req.send(replayed)
    assert req.poll(2000)
    answer = KEY.open_reply(req.recv())
    req.close()
    assert messages.decode_reply(answer) == messages.Refused(reason=side_channel.NOT_AUTHENTICATED)
    assert served.reached == []


def test_a_flood_from_one_address_is_logged_once_and_counted_in_full(served, caplog):
    caplog.set_level(logging.WARNING, logger=side_channel.logger.name)
    dealer = raw_socket(zmq.DEALER, served.port)
    for _ in range(200):
        dealer.send(b"garbage")
    deadline = time.monotonic() + 5
    while served.refused < 200 and time.monotonic() < deadline:
        time.sleep(0.02)
    dealer.close()
    assert served.refused == 200
    lines = [r.getMessage() for r in caplog.records if r.name == side_channel.logger.name]
    assert len(lines) == 1 and "127.0.0.1" in lines[0]


def test_refusals_reach_the_engines_metrics():
    config = parse_config("kv_producer", "prefill-0", 26400, {"ascend_pd_shapes": {"prefill": {"tp_size": 1},
                                                                                  "decode": {"tp_size": 1}}})
    worker = PullWorker(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)
    port = free_port()
    server = side_channel.SideChannelServer("127.0.0.1", port, worker._handle, worker.key, on_refused=worker._refused)
    try:
        with pytest.raises(side_channel.PeerUnreachable):
            side_channel.request("127.0.0.1", port, messages.ReadDone(request_id="r", dst_rank=0),
                                 key=PeerKey(new_secret()), timeout_s=2, retries=2, backoff_s=0.01)
    finally:
        server.stop()
        worker.shutdown()
    registry = CollectorRegistry()
    metric_types = {kind: partial(kind, registry=registry) for kind in (Gauge, Counter, Histogram)}
    prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                ["model_name", "engine"], {0: ["tiny", "0"]})
    prom.observe(AscendPDStats(data=worker.take_stats().data).data, engine_idx=0)
    labels = {"model_name": "tiny", "engine": "0"}
    assert registry.get_sample_value("vllm:ascend_pd_side_channel_refused_total", labels) == 3
    assert "r" not in worker.served  # the forged ReadDone freed nothing


def test_the_side_channel_never_listens_on_every_interface():
    with pytest.raises(InputError) as error:
        side_channel.SideChannelServer("0.0.0.0", free_port(), lambda m: messages.Ack(), KEY)
    assert error.value.field == "VLLM_HOST_IP"


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
