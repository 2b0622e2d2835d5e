"""The proxy's public port against clients that misbehave, on real sockets: every limit of the HTTP server, bytes that
are not HTTP, bodies the proxy cannot route, forged internal fields and headers, API keys, TLS, and who may see the
backends behind /health and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import logging
import re
import socket
import ssl
import threading

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ascend_pd.errors import InputError
from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.siblings import SIBLING_HEADER, Siblings, make_siblings
from ascend_pd.proxy.tls import server_context
from ascend_pd.proxy.wire.server import HttpServer, Request, Response, ServerLimits
from tests.fakes.vllm_api import Behaviour
from tests.integration.proxy.conftest import _endpoint

COMPLETION = {"model": "fake-model", "prompt": "The capital of France is", "max_tokens": 6}
ADMIN_TOKEN = "admin-token-for-tests"


# --- the HTTP server's limits ---------------------------------------------------------------------------------------
class Held:
    """A handler that answers at once, or holds every request until released; counts what it was given."""

    def __init__(self, hold: bool = False):
        self.gate = asyncio.Event()
        if not hold:
            self.gate.set()
        self.seen: list[Request] = []

    async def __call__(self, request: Request) -> Response:
        self.seen.append(request)
        await self.gate.wait()
        return Response(b'{"ok": true}')


async def serving(handler, **limits) -> tuple[HttpServer, str, int]:
    server = HttpServer(handler, ServerLimits(**limits))
    host, port = await server.start("127.0.0.1", 0)
    return server, host, port


def request_bytes(path: str = "/x", body: bytes = b"", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


async def answers(reader: asyncio.StreamReader, timeout: float = 5.0) -> list[int]:
    """The status of every answer on a connection until the server closes it."""
    data = await asyncio.wait_for(reader.read(), timeout)
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


async def served(host: str, port: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request_bytes(extra="Connection: close\r\n"))
    statuses = await answers(reader)
    writer.close()
    return statuses[0]


@pytest.mark.asyncio
async def test_a_connection_past_the_cap_is_answered_503_and_closed_and_a_freed_slot_serves_again():
    server, host, port = await serving(Held(), max_connections=2)
    try:
        held = [await asyncio.open_connection(host, port) for _ in range(2)]
        await asyncio.sleep(0.05)  # both accepted
        reader, writer = await asyncio.open_connection(host, port)
        assert await answers(reader) == [503]
        writer.close()
        held[0][1].close()
        await asyncio.sleep(0.05)
        assert await served(host, port) == 200
        held[1][1].close()
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_a_burst_of_pipelined_requests_is_read_no_further_than_the_limit():
    handler = Held(hold=True)
    server, host, port = await serving(handler, max_pipelined=4)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request_bytes() * 200)
        await asyncio.sleep(0.2)
        connection = next(iter(server.connections))
        assert len(connection._queue) <= 4  # held by the server: at most the limit, not the 200 sent
        handler.gate.set()
        statuses = await answers(reader)
        assert statuses[-1] == 503 and set(statuses[:-1]) == {200} and len(statuses) <= 6
        writer.close()
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_pipelined_requests_sent_one_by_one_pause_reading_and_are_all_served_in_order():
    handler = Held(hold=True)
    server, host, port = await serving(handler, max_pipelined=3)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        for index in range(4):  # one served, three waiting
            writer.write(request_bytes(f"/{index}"))
            await asyncio.sleep(0.05)
        connection = next(iter(server.connections))
        assert not connection._reading  # the queue is full: the client is not read until it has room
        handler.gate.set()
        writer.write(request_bytes("/4", extra="Connection: close\r\n"))
        assert await answers(reader) == [200] * 5
        assert [r.path for r in handler.seen] == ["/0", "/1", "/2", "/3", "/4"]
        writer.close()
    finally:
        await server.close()


@pytest.mark.parametrize("headers", [f"X-Big: {'a' * 20_000}\r\n", "X: \r\n" * 5_000])
@pytest.mark.asyncio
async def test_headers_over_the_limit_are_a_431_and_the_connection_closes(headers):
    handler = Held()
    server, host, port = await serving(handler, max_header_bytes=8 * 1024)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request_bytes(extra=headers))
        assert await answers(reader) == [431]
        assert handler.seen == []
        writer.close()
        assert await served(host, port) == 200
    finally:
        await server.close()


@pytest.mark.parametrize("before", [b"", request_bytes()], ids=["first", "after-a-request"])
@pytest.mark.asyncio
async def test_a_header_line_that_never_ends_is_a_431_at_the_limit_not_held(before):
    """llhttp keeps a header value until its line ends: without counting the raw bytes, `X-Big: ` and megabytes with
    no line end would all be held, the connection open."""
    handler = Held()
    server, host, port = await serving(handler, max_header_bytes=8 * 1024)
    loop = asyncio.get_running_loop()
    # a raw socket: the server closes with the client's bytes unread, and a reset must not hide its answer
    with socket.create_connection((host, port)) as client:
        client.setblocking(False)
        try:
            received = b""
            await loop.sock_sendall(client, before + b"POST /x HTTP/1.1\r\nHost: x\r\nX-Big: ")
            for _ in range(200):  # up to 12.5 MiB, and never a line end
                with contextlib.suppress(BlockingIOError):
                    received += client.recv(65536)
                if b" 431 " in received:
                    break
                try:
                    await asyncio.wait_for(loop.sock_sendall(client, b"a" * 65536), 5)
                except OSError:  # closed by the server
                    break
            while chunk := await asyncio.wait_for(_recv_or_reset(loop, client), 5):
                received += chunk
            statuses = [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]
            assert statuses == [200] * bool(before) + [431]
            assert len(handler.seen) == bool(before)  # only the whole request before it reached the handler
            assert await served(host, port) == 200
        finally:
            await server.close()


async def _recv_or_reset(loop: asyncio.AbstractEventLoop, client: socket.socket) -> bytes:
    try:
        return await loop.sock_recv(client, 65536)
    except ConnectionResetError:
        return b""


@pytest.mark.asyncio
async def test_a_chunked_body_over_the_limit_is_a_413_before_the_client_ends_it():
    handler = Held()
    server, host, port = await serving(handler, max_body_bytes=10_000)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(30):  # 30 kB and no last chunk: a client that would go on for ever
            writer.write(b"400\r\n" + b"a" * 1024 + b"\r\n")
        assert await answers(reader) == [413]
        assert handler.seen == []
        writer.close()
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_bodies_held_across_connections_past_the_total_are_a_503_and_room_comes_back():
    handler = Held(hold=True)
    server, host, port = await serving(handler, max_body_bytes=800, max_buffered_bytes=1000)
    try:
        first = await asyncio.open_connection(host, port)
        first[1].write(request_bytes(body=b"a" * 700))
        await asyncio.sleep(0.1)  # its handler holds the body
        second = await asyncio.open_connection(host, port)
        second[1].write(request_bytes(body=b"b" * 700))
        assert await answers(second[0]) == [503]
        handler.gate.set()
        first[1].write(request_bytes(body=b"c" * 700, extra="Connection: close\r\n"))
        assert await answers(first[0]) == [200, 200]  # the first body was let go: the next fits
        assert server.buffered == 0
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_a_client_trickling_a_request_is_cut_off_even_while_its_previous_request_is_served():
    handler = Held(hold=True)  # request one is "streaming" for as long as the test runs
    server, host, port = await serving(handler, read_timeout=0.3)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request_bytes())
        await asyncio.sleep(0.05)
        writer.write(b"POST /slow HTTP/1.1\r\nHost: x\r\n")  # and one header line a while, for ever
        started = asyncio.get_running_loop().time()
        for _ in range(200):  # 10 s of drip, if nothing cuts it off
            await asyncio.sleep(0.05)
            if reader.at_eof() or writer.is_closing():
                break
            writer.write(b"X-Drip: 1\r\n")
        assert await asyncio.wait_for(reader.read(), 3) == b""
        # cut off after its 0.3 s, with room for a loaded machine; a client never cut off drips for 10 s
        assert asyncio.get_running_loop().time() - started < 5
        assert not server.connections
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_garbage_after_a_request_in_flight_is_answered_400_after_it_in_order(caplog):
    handler = Held(hold=True)
    server, host, port = await serving(handler)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request_bytes())
        await asyncio.sleep(0.05)
        writer.write(b"\x16\x03\x01 not http at all\r\n\r\n")
        await asyncio.sleep(0.05)
        handler.gate.set()
        assert await answers(reader) == [200, 400]
        writer.close()
        assert await served(host, port) == 200
    finally:
        await server.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class ServerThread:
    """An HttpServer on its own event loop in a thread, for tests that drive it with blocking sockets."""

    def __init__(self, **limits):
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.limits = limits
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.handler = Held()
        self.server = HttpServer(self.handler, ServerLimits(**self.limits))
        _, self.port = self.loop.run_until_complete(self.server.start("127.0.0.1", 0))
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.close())

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        self.ready.wait(5)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def exchange(self, data: bytes) -> bytes:
        """Send `data`, then read until the server closes (or stays silent for a second)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as client:
            client.sendall(data)
            client.shutdown(socket.SHUT_WR)
            received = b""
            try:
                while chunk := client.recv(65536):
                    received += chunk
            except (TimeoutError, ConnectionResetError):
                pass
            return received


VALID = [request_bytes(body=b'{"prompt": "hi"}'), b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
         b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]


@st.composite
def mutated_requests(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID)) * draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "flip", "pad"]))
        if action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif action == "pad":  # a header line of any length, where one may be
            at = data.find(b"\r\n") + 2
            data[at:at] = b"X-Pad: " + b"a" * draw(st.integers(0, 6000)) + b"\r\n"
        elif action == "delete":
            del data[at:at + draw(st.integers(1, 20))]
        elif at < len(data):
            data[at] ^= draw(st.integers(1, 255))
    return bytes(data)


def test_any_bytes_leave_the_server_serving_and_its_log_clean(caplog):
    caplog.set_level(logging.WARNING)
    with ServerThread(read_timeout=0.2, keep_alive=0.2, max_header_bytes=2048, max_body_bytes=4096) as running:

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.one_of(st.binary(max_size=3000), mutated_requests()))
        def any_bytes(data: bytes) -> None:
            answer = running.exchange(data)
            if answer:  # whatever it says is HTTP, never a half-written or interleaved answer
                assert answer.startswith(b"HTTP/1.1 "), answer[:80]

        any_bytes()
        limits = running.server.limits
        assert all(len(r.body) <= limits.max_body_bytes and sum(len(k) + len(v) for k, v in r.headers.items())
                   <= limits.max_header_bytes for r in running.handler.seen)  # nothing past a limit was served
        assert running.exchange(request_bytes(extra="Connection: close\r\n")).startswith(b"HTTP/1.1 200 ")
        assert not running.server.connections
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# --- what a client sends the flows ----------------------------------------------------------------------------------
ATTACKER = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "evil",
            "remote_block_ids": ["1"], "remote_host": "attacker.example", "remote_port": 6666, "tp_size": 1}


@pytest.mark.asyncio
async def test_a_clients_kv_transfer_params_never_reach_decode_when_prefill_answers_without_its_own(rig):
    await rig.start(mode="pull")
    rig.prefills[0].omit_kv_params_next()  # P answers without kv_transfer_params: D gets the client's body
    status, _ = await rig.post({**COMPLETION, "kv_transfer_params": ATTACKER})
    assert status == 200
    assert "kv_transfer_params" not in rig.decodes[0].received[0]
    assert rig.prefills[0].received[0]["kv_transfer_params"] == {"do_remote_decode": True}


@pytest.mark.asyncio
async def test_a_clients_kv_transfer_params_never_reach_a_colocated_instance(rig):
    await rig.start(prefills=0, decodes=0, colocated=1)
    status, _ = await rig.post({**COMPLETION, "kv_transfer_params": ATTACKER})
    assert status == 200
    assert "kv_transfer_params" not in rig.colocated[0].received[0]


@pytest.mark.asyncio
async def test_a_clients_sibling_header_gets_no_sibling_treatment(rig):
    """/metrics on one worker speaks for every worker, unless the call comes from a sibling: a client forging the
    header still gets the whole host's counts."""
    await rig.start()  # the engines
    load, sockets = make_siblings(2)
    settings = ProxySettings(health_interval=0, engine_load_interval=0, admin_token=ADMIN_TOKEN)
    endpoints = [_endpoint(e) for e in rig.prefills + rig.decodes]
    workers = [await start_server(ProxyState(endpoints, settings, shared_load=load), "127.0.0.1", 0,
                                  siblings=Siblings(index, sockets, load)) for index in range(2)]
    try:
        await rig.post(COMPLETION, base=workers[1][1])  # served by worker 1 only
        forged = {"Authorization": f"Bearer {ADMIN_TOKEN}", SIBLING_HEADER: "1"}
        async with rig.session.get(workers[0][1] + "/metrics", headers=forged) as answer:
            text = await answer.text()
        assert 'ascend_pd_proxy_requests_total{endpoint="/v1/completions",outcome="200"} 1.0' in text
    finally:
        for server, _ in workers:
            await server.cleanup()
        for sock in sockets:
            sock.close()


MALFORMED = [("/v1/chat/completions", b'{"model": "m", "messages": 5}'),
             ("/v1/completions", b'{"model": "m", "prompt": {}}'),
             ("/v1/completions", b"this is not json"),
             ("/v1/completions", b'["a", "list"]'),
             ("/v1/completions", b'{"model": "m", "prompt": "p", "max_tokens": "many"}'),
             ("/v1/completions", b'{"model": "m", "prompt": "p", "stream": "yes"}'),
             ("/v1/chat/completions", b'{"messages": [{"content": [{"type": "text", "text": 5}]}]}'),
             ("/v1/chat/completions", b'{"messages": [{"content": [{"type": "text", "text": null}]}]}'),
             ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [5]}]}'),
             ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": {"text": "hi"}}]}')]


@pytest.mark.parametrize("path,body", MALFORMED)
@pytest.mark.asyncio
async def test_a_malformed_body_is_a_400_with_an_openai_error_and_no_demand(rig, caplog, path, body):
    await rig.start()
    async with rig.session.post(rig.url + path, data=body, headers={"Content-Type": "application/json"}) as answer:
        assert answer.status == 400
        error = msgspec.json.decode(await answer.read())["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == 400 and error["message"]
    assert rig.prefills[0].received == [] and rig.decodes[0].received == []
    contents = rig.proxy.window.snapshot()
    assert contents.arrivals == [] and contents.finished == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class UnreadableTokens:
    """A tokenizer that fails on a prompt: an error of a library the proxy did not foresee."""

    def count(self, text: str) -> int:
        raise RuntimeError("cannot tokenize this")


@pytest.mark.asyncio
async def test_any_failure_to_read_a_request_is_a_400_logged_once_not_a_500(rig, caplog):
    await rig.start()
    rig.proxy.tokens = UnreadableTokens()
    for _ in range(3):
        async with rig.session.post(rig.url + "/v1/completions", json=COMPLETION) as answer:
            assert answer.status == 400
            assert msgspec.json.decode(await answer.read())["error"]["type"] == "invalid_request_error"
    assert rig.prefills[0].received == [] and rig.decodes[0].received == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # a client cannot flood the log


@pytest.mark.asyncio
async def test_a_request_the_proxy_answers_429_is_not_demand(rig):
    await rig.start(max_inflight=1, behaviour=Behaviour(prefill_delay=0.3))
    first = asyncio.create_task(rig.post(COMPLETION))
    await asyncio.sleep(0.1)
    status, _ = await rig.post(COMPLETION)
    assert status == 429
    assert (await first)[0] == 200
    assert len(rig.proxy.window.snapshot().arrivals) == 1


# --- API keys -------------------------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_api_keys_guard_the_openai_endpoints_and_leave_health_open(rig, caplog):
    caplog.set_level(logging.DEBUG)
    await rig.start(api_keys=("first-key", "second-key"))
    for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"Authorization": "first-key"}):
        async with rig.session.post(rig.url + "/v1/completions", json=COMPLETION, headers=headers) as answer:
            assert answer.status == 401
            assert msgspec.json.decode(await answer.read())["error"]["code"] == 401
        async with rig.session.get(rig.url + "/v1/models", headers=headers) as answer:
            assert answer.status == 401
    assert rig.prefills[0].received == []
    async with rig.session.post(rig.url + "/v1/completions", json=COMPLETION,
                                headers={"Authorization": "Bearer second-key"}) as answer:
        assert answer.status == 200
    async with rig.session.get(rig.url + "/health") as answer:
        assert answer.status == 200
    assert not any("first-key" in r.getMessage() or "second-key" in r.getMessage() for r in caplog.records)


def test_api_keys_come_from_the_flag_its_env_variable_and_a_file(tmp_path, monkeypatch):
    from ascend_pd.cli.proxy import front_door_settings, proxy_cmd
    from ascend_pd.proxy.api_keys import API_KEY_ENV

    keys_file = tmp_path / "keys"
    keys_file.write_text("# one a line\nfile-key-1\n\nfile-key-2\n")
    monkeypatch.setenv(API_KEY_ENV, "env-key")
    params = proxy_cmd.make_context("proxy", ["--api-key-file", str(keys_file), "--max-pipelined", "4"]).params
    door = front_door_settings(**{name: params[name] for name in (
        "api_keys", "api_key_file", "ssl_certfile", "ssl_keyfile", "public_detail", "max_connections",
        "max_pipelined", "max_header_bytes", "max_body_bytes", "max_buffered_bytes", "client_read_timeout")})
    assert door["api_keys"] == ("env-key", "file-key-1", "file-key-2")
    assert door["limits"] == ServerLimits(max_pipelined=4)
    empty = tmp_path / "empty"
    empty.write_text("\n# nothing\n")
    with pytest.raises(InputError, match="--api-key-file"):
        front_door_settings((), str(empty), None, None, False, 10, 4, 4096, 1000, 2000, 1.0)


# --- TLS ------------------------------------------------------------------------------------------------------------
def self_signed(directory) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    directory.mkdir(exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.mark.asyncio
async def test_the_public_port_serves_https_with_the_given_certificate(rig, tmp_path):
    cert, key = self_signed(tmp_path)
    await rig.start(ssl_certfile=cert, ssl_keyfile=key)
    assert rig.url.startswith("https://")
    trust = ssl.create_default_context(cafile=cert)
    async with rig.session.post(rig.url + "/v1/completions", json=COMPLETION, ssl=trust) as answer:
        assert answer.status == 200
        assert msgspec.json.decode(await answer.read())["choices"]
    with pytest.raises(aiohttp.ClientError):  # plain HTTP finds no server there
        async with rig.session.post(rig.url.replace("https", "http") + "/v1/completions", json=COMPLETION) as a:
            await a.read()


@pytest.mark.asyncio
async def test_a_tls_handshake_that_never_comes_is_cut_off_after_the_read_timeout(tmp_path):
    """A handshake counts against no limit until it is done, so its time is bounded as a request's is."""
    cert, key = self_signed(tmp_path)
    server = HttpServer(Held(), ServerLimits(read_timeout=0.3), server_context(cert, key))
    host, port = await server.start("127.0.0.1", 0)
    try:
        silent, _ = await asyncio.open_connection(host, port)  # TCP, and never a ClientHello
        started = asyncio.get_running_loop().time()
        assert await asyncio.wait_for(silent.read(), 10) == b""
        assert asyncio.get_running_loop().time() - started < 5  # not the event loop's default of 60 s
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl.create_default_context(cafile=cert))
        writer.write(request_bytes(extra="Connection: close\r\n"))
        assert await answers(reader) == [200]
        writer.close()
    finally:
        await server.close()


def test_unusable_tls_files_are_input_errors_naming_the_flag(tmp_path):
    cert, key = self_signed(tmp_path)
    _, other_key = self_signed(tmp_path / "other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(InputError, match="--ssl-certfile"):
        server_context(str(garbage), key)
    with pytest.raises(InputError, match="--ssl-keyfile"):
        server_context(cert, other_key)
    with pytest.raises(InputError, match="--ssl-keyfile"):
        server_context(cert, str(tmp_path / "missing.pem"))
    with pytest.raises(InputError, match="--ssl-keyfile"):
        server_context(cert, None)
    assert server_context(cert, key) is not None and server_context(None, None) is None


# --- who sees the backends ------------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_health_detail_and_metrics_are_for_the_admin_token_only(rig):
    await rig.start(public_detail=False, admin_token=ADMIN_TOKEN)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with rig.session.get(rig.url + "/health") as answer:
        assert answer.status == 200
        shown = await answer.read()
    assert rig.decodes[0].url.encode() not in shown and b"backends" not in shown
    async with rig.session.get(rig.url + "/health", headers=admin) as answer:
        assert {b["url"] for b in (await answer.json())["backends"]} == {rig.prefills[0].url, rig.decodes[0].url}
    async with rig.session.get(rig.url + "/metrics") as answer:
        assert answer.status == 401
        assert rig.decodes[0].url.encode() not in await answer.read()
    async with rig.session.get(rig.url + "/metrics", headers=admin) as answer:
        assert answer.status == 200 and rig.decodes[0].url in await answer.text()


@pytest.mark.asyncio
async def test_public_detail_shows_the_backends_to_anyone(rig):
    await rig.start(public_detail=True)
    async with rig.session.get(rig.url + "/health") as answer:
        assert len((await answer.json())["backends"]) == 2
    async with rig.session.get(rig.url + "/metrics") as answer:
        assert answer.status == 200
