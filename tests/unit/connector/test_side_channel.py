"""The ZMQ side channel on loopback: replies, refusals, unreachable peers, servers without the key and taken
ports."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq

from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.deploy.secrets import KV_SECRET_ENV, new_secret
from ascend_pd.errors import InputError
from tests.ports import free_port

KEY = PeerKey(new_secret())


def test_a_request_gets_the_handlers_reply():
    port = free_port()
    seen = []
    server = side_channel.SideChannelServer("127.0.0.1", port,
                                            lambda m: seen.append(m) or messages.Ack(), KEY)
    try:
        reply = side_channel.request("127.0.0.1", port, messages.ReadDone(request_id="r-1", dst_rank=3), key=KEY)
    finally:
        server.stop()
    assert reply == messages.Ack() and seen == [messages.ReadDone(request_id="r-1", dst_rank=3)]


def test_a_handler_error_comes_back_as_a_refusal_and_the_channel_keeps_serving():
    port = free_port()

    def handler(message):
        if isinstance(message, messages.GetMeta):
            raise KeyError("no caches")
        return messages.Ack()

    server = side_channel.SideChannelServer("127.0.0.1", port, handler, KEY)
    try:
        refused = side_channel.request("127.0.0.1", port, messages.GetMeta(), key=KEY)
        after = side_channel.request("127.0.0.1", port, messages.ReadDone(request_id="r", dst_rank=0), key=KEY)
    finally:
        server.stop()
    assert isinstance(refused, messages.Refused) and "no caches" in refused.reason
    assert after == messages.Ack()


def test_an_unreachable_peer_raises_after_the_retries_instead_of_hanging():
    started = time.monotonic()
    with pytest.raises(side_channel.PeerUnreachable):
        side_channel.request("127.0.0.1", free_port(), messages.GetMeta(), key=KEY, timeout_s=0.2, retries=2,
                             backoff_s=0.05)
    assert time.monotonic() - started < 5


def test_many_retries_stay_a_bounded_wait_because_the_backoff_stops_doubling(monkeypatch):
    """Eight retries from a 0.5 s backoff would pause 127.5 s if it kept doubling; capped (here at 0.1 s), 0.8 s."""
    monkeypatch.setattr(side_channel, "_MAX_BACKOFF_S", 0.1)
    started = time.monotonic()
    with pytest.raises(side_channel.PeerUnreachable, match="9 tries"):
        side_channel.request("127.0.0.1", free_port(), messages.GetMeta(), key=KEY, timeout_s=0.05, retries=8,
                             backoff_s=0.5)
    assert time.monotonic() - started < 3


def test_a_message_given_as_a_callable_is_made_afresh_for_every_try():
    """A push announcement says how long D will still wait: a retry must not repeat the first try's figure."""
    with socket.socket() as silent:  # takes connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        made = []
        with pytest.raises(side_channel.PeerUnreachable, match="3 tries"):
            side_channel.request("127.0.0.1", silent.getsockname()[1],
                                 lambda: made.append(time.monotonic()) or messages.GetMeta(), key=KEY,
                                 timeout_s=0.1, retries=2, backoff_s=0.05)
    sent = made[1:]  # the first call only names the message for the logs
    assert len(sent) == 3 and sent == sorted(set(sent))


def test_a_taken_port_is_a_clear_error_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError) as error:
            side_channel.SideChannelServer("127.0.0.1", port, lambda m: messages.Ack(), KEY)
    assert f"port {port}" in str(error.value) and error.value.field == "kv_port"


def test_the_server_thread_stops():
    port = free_port()
    server = side_channel.SideChannelServer("127.0.0.1", port, lambda m: messages.Ack(), KEY)
    name = f"ascend-pd-side-channel-{port}"
    assert name in {t.name for t in threading.enumerate()}
    server.stop()
    assert name not in {t.name for t in threading.enumerate()}


def test_a_server_without_curve_gets_no_request_and_the_error_says_why_at_once():
    """A plain ZMQ server on the port (an older side channel, another connector's) hears nothing of the request: the
    client will not talk to a server that cannot prove the deployment's key, and says so without waiting out a try."""
    plain = side_channel._connector_context().socket(zmq.ROUTER)
    plain.setsockopt(zmq.LINGER, 0)
    port = plain.bind_to_random_port("tcp://127.0.0.1")
    try:
        started = time.monotonic()
        with pytest.raises(side_channel.PeerUnreachable, match=f"2 tries failed the CURVE handshake.*{KV_SECRET_ENV}"):
            side_channel.request("127.0.0.1", port, messages.GetMeta(), key=KEY, timeout_s=30, retries=1,
                                 backoff_s=0.05)
        assert time.monotonic() - started < 30
        assert not plain.poll(0)
    finally:
        plain.close()
