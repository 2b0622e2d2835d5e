"""Peers: side-channel messages bounded by a deadline, and a peer that stopped answering failed at once."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ascend_pd.connector import messages
from ascend_pd.connector.config import parse_config
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.connector.peers import Peers
from ascend_pd.connector.side_channel import PeerUnreachable, SideChannelServer
from ascend_pd.deploy.secrets import new_secret

KEY = PeerKey(new_secret())


def peers_of(config) -> Peers:
    return Peers(config, KEY, threading.Event())


def config(**extra):
    return parse_config("kv_consumer", "decode-0", 26100, {
        "ascend_pd_shapes": {"prefill": {"tp_size": 1}, "decode": {"tp_size": 1}},
        "handshake_timeout_s": 0.3, "handshake_retries": 1,
        **extra})


@pytest.fixture
def silent_port():
    """A port that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def test_a_silent_peer_is_failed_at_once_until_its_backoff_has_passed(silent_port):
    peers = peers_of(config(peer_backoff_s=1.5))
    started = time.monotonic()
    with pytest.raises(PeerUnreachable):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta())
    first = time.monotonic() - started
    started = time.monotonic()
    with pytest.raises(PeerUnreachable, match="peer_backoff_s"):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta())
    assert time.monotonic() - started < 0.1 < first  # the second ask did not wait out the tries again
    time.sleep(1.6)
    started = time.monotonic()
    with pytest.raises(PeerUnreachable, match="did not answer GetMeta"):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta())
    assert time.monotonic() - started >= 0.3  # tried again after the backoff


def test_a_deadline_cuts_the_tries_short_and_a_peer_never_given_a_whole_try_is_not_marked_down(silent_port):
    peers = peers_of(config(handshake_timeout_s=5, handshake_retries=5))
    started = time.monotonic()
    with pytest.raises(PeerUnreachable):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta(), deadline=time.monotonic() + 0.4)
    assert time.monotonic() - started < 1.5
    with pytest.raises(PeerUnreachable, match="did not answer GetMeta"):  # asked again, not failed from memory
        peers.ask("127.0.0.1", silent_port, messages.GetMeta(), deadline=time.monotonic() + 0.2)


def test_a_peer_silent_for_a_whole_try_is_marked_down_even_when_the_deadline_ends_the_rest(silent_port):
    peers = peers_of(config(handshake_timeout_s=0.3, handshake_retries=5))
    with pytest.raises(PeerUnreachable):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta(), deadline=time.monotonic() + 0.5)
    with pytest.raises(PeerUnreachable, match="peer_backoff_s"):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta(), deadline=time.monotonic() + 5)


def test_a_peer_answering_again_is_no_longer_marked_down():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    peers = peers_of(config(peer_backoff_s=0.5))
    with pytest.raises(PeerUnreachable):
        peers.ask("127.0.0.1", port, messages.GetMeta())  # nothing listens yet
    time.sleep(0.6)
    server = SideChannelServer("127.0.0.1", port, lambda message: messages.Ack(), KEY)
    try:
        assert peers.ask("127.0.0.1", port, messages.GetMeta()) == messages.Ack()
    finally:
        server.stop()


def test_concurrent_requests_share_one_handshake_with_a_peer():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    asked = []
    meta = messages.AgentMetadata(engine_id="prefill-0", tp_rank=0, tp_size=1, session="127.0.0.1:1",
                                  block_size=16, planes=[])
    server = SideChannelServer("127.0.0.1", port, lambda message: asked.append(message) or meta, KEY)
    peers = peers_of(config())
    try:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: peers.metadata("127.0.0.1", port, time.monotonic() + 5, lambda m: None),
                                range(8)))
    finally:
        server.stop()
    assert got == [meta] * 8 and len(asked) == 1


def test_a_notice_tries_a_peer_marked_down(silent_port):
    peers = peers_of(config(peer_backoff_s=30))
    with pytest.raises(PeerUnreachable):
        peers.ask("127.0.0.1", silent_port, messages.GetMeta())
    started = time.monotonic()
    with pytest.raises(PeerUnreachable, match="did not answer ReadDone"):  # asked, not refused from memory
        peers.ask("127.0.0.1", silent_port, messages.ReadDone(request_id="r", dst_rank=0), even_if_down=True)
    assert time.monotonic() - started >= 0.3
