"""The bounded HTTP calls `check` and the autoscaler make to engines and proxy replicas, against real servers: one
that answers, one named as the environment's HTTP proxy (which must never be asked), one that trickles its answer, one
that never stops sending, one over TLS, and one that answers any bytes at all."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_pd.autoscale.engine_kv import held_requests
from ascend_pd.autoscale.observe import fetch_workload
from ascend_pd.autoscale.proxy_admin import StepFailed, http_json, not_answering, wait_healthy
from ascend_pd.deploy.http_calls import Unreachable, call
from ascend_pd.errors import InputError
from tests import fuzz
from tests.fakes.threaded_http import Server, send

TOKEN = "admin-secret"
METRICS = ("# TYPE vllm:ascend_pd_kv_held_requests gauge\n"
           'vllm:ascend_pd_kv_held_requests{engine="0"} 2.0\n')


def engine_and_proxy(handler: BaseHTTPRequestHandler) -> None:
    """What an engine and a proxy replica answer, all at one address."""
    if handler.path == "/metrics":
        send(handler, 200, METRICS.encode(), "text/plain")
    elif handler.path == "/version":
        send(handler, 200, b'{"version": "0.32.0"}')
    elif handler.path == "/health":
        send(handler, 200, b"")
    elif handler.path == "/v1/workload" and handler.headers.get("Authorization") == f"Bearer {TOKEN}":
        send(handler, 200, b'{"window": 60}')
    elif handler.path == "/admin/backends":
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else None
        send(handler, 200, json.dumps([{"url": "u", "asked": body}]).encode())
    else:
        send(handler, 404, b"{}")


@pytest.fixture
def site():
    server = Server(engine_and_proxy)
    yield server
    server.close()


@pytest.fixture
def environment_proxy(monkeypatch):
    """A server named as the HTTP(S) proxy in every variable urllib and curl read: it is asked nothing."""
    catcher = Server(lambda handler: send(handler, 502, b"{}"))
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, catcher.url)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield catcher
    catcher.close()


def test_no_call_goes_through_the_environments_http_proxy_nor_hands_it_the_token(site, environment_proxy):
    assert call(site.url + "/health", 2).status == 200
    assert http_json("POST", site.url + "/admin/backends", {"url": "x"}, TOKEN) == [{"url": "u", "asked": {"url": "x"}}]
    assert http_json("GET", site.url + "/admin/backends", None, TOKEN)[0]["asked"] is None
    assert not_answering([site.url]) == []
    wait_healthy([site.url], 2)
    assert held_requests(site.url, 2) == 2
    assert fetch_workload(site.url, TOKEN) == {"window": 60}
    assert environment_proxy.requests == []
    assert ("POST", "/admin/backends", f"Bearer {TOKEN}") in site.requests


def test_a_put_is_sent_as_a_put_with_its_body():
    seen = []

    def answer(handler):
        seen.append((handler.command, json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))))
        send(handler, 200, b"")

    server = Server(answer)
    try:
        assert http_json("PUT", server.url + "/admin/table", {"generation": 3}, TOKEN) is None
    finally:
        server.close()
    assert seen == [("PUT", {"generation": 3})]


def trickle(handler: BaseHTTPRequestHandler) -> None:
    """Headers at once, then a byte of the body every 0.2 s, for ever (till the client goes)."""
    handler.send_response(200)
    handler.send_header("Content-Length", "1000000")
    handler.end_headers()
    try:
        while True:
            handler.wfile.write(b"[")
            handler.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass


def endless(handler: BaseHTTPRequestHandler) -> None:
    """A chunked body that never ends."""
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
    try:
        while True:
            handler.wfile.write(chunk)
    except OSError:
        pass


@pytest.mark.parametrize("caller", ["call", "admin", "engine metrics", "workload"])
def test_a_trickling_peer_is_given_up_at_the_timeout(caller):
    server = Server(trickle)
    calls = {"call": lambda: call(server.url + "/x", 1.0),
             "admin": lambda: http_json("GET", server.url + "/admin/backends", None, TOKEN, 1.0),
             "engine metrics": lambda: held_requests(server.url, 1.0),
             "workload": lambda: fetch_workload(server.url, TOKEN, 1.0)}
    started = time.monotonic()
    try:
        with pytest.raises((Unreachable, StepFailed, InputError), match="no answer within 1 s"):
            calls[caller]()
    finally:
        server.close()
    assert time.monotonic() - started < 2.0


def test_an_answer_without_end_is_cut_at_its_bound_and_named():
    server = Server(endless)
    try:
        with pytest.raises(Unreachable, match="longer than 4194304 bytes"):
            call(server.url + "/x", 10, max_bytes=4 << 20)
        started = time.monotonic()
        with pytest.raises(StepFailed, match="longer than"):  # the default bound, well inside the call's timeout
            http_json("GET", server.url + "/admin/backends", None, TOKEN, 30)
        assert time.monotonic() - started < 10
    finally:
        server.close()


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def test_https_is_verified_against_the_hosts_trusted_certificates(ca, tmp_path, monkeypatch):
    server = Server(engine_and_proxy, tls=ca.issue_cert("127.0.0.1"))
    try:
        with pytest.raises(Unreachable, match="TLS failed"):
            call(server.url + "/health", 2)  # its CA is not trusted yet
        ca_file = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        assert call(server.url + "/health", 2).status == 200
        assert fetch_workload(server.url, TOKEN) == {"window": 60}
    finally:
        server.close()


@pytest.fixture(scope="module")
def raw_peer():
    """A TCP peer that reads the request and answers `raw_peer.answer` (any bytes), then closes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)

    class Peer:
        answer = b""
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(1 << 16)
                    conn.sendall(Peer.answer)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    yield Peer
    sock.close()


STATUS_LINES = [b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 409 Conflict\r\n", b"HTTP/1.0 500 x\r\n", b""]
HEADERS = [b"Content-Length: 5\r\n", b"Content-Length: -1\r\n", b"Content-Length: x\r\n",
           b"Transfer-Encoding: chunked\r\n", b"Content-Type: application/json\r\n"]


@settings(max_examples=fuzz.examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(status=st.sampled_from(STATUS_LINES), headers=st.lists(st.sampled_from(HEADERS), max_size=3),
       body=st.binary(max_size=64), noise=st.binary(max_size=16))
def test_any_bytes_from_a_peer_give_an_answer_or_a_named_failure(raw_peer, status, headers, body, noise):
    raw_peer.answer = status + b"".join(headers) + b"\r\n" + body + noise
    try:
        answer = call(raw_peer.url + "/x", 2)
        assert isinstance(answer.status, int)
    except Unreachable as failed:
        assert str(failed)
    try:
        http_json("GET", raw_peer.url + "/x", None, TOKEN, 2)
    except StepFailed as failed:
        assert str(failed)
