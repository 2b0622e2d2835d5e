"""The proxy's own HTTP data plane against peers that misbehave on real sockets: a backend that accepts and never
answers, one that stops in the middle of a stream, a client that sends half a request, a client that never reads.
Every wait is bounded; connections to backends are reused."""

import asyncio

import aiohttp
import pytest

from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.endpoints import endpoint_from_url
from ascend_pd.proxy.settings import BackendTimeouts, ProxySettings
from tests.fakes.vllm_api import FakeEngine
from ascend_pd.proxy.wire.client import CallTimeouts, HttpClient, Target
from ascend_pd.proxy.wire.server import ClientGone, HttpServer, Request, Response, ServerLimits


class RawPeer:
    """A TCP server that answers with fixed bytes (or nothing) and then keeps the connection open, counting accepts."""

    def __init__(self, answer: bytes = b""):
        self.answer = answer
        self.accepted = 0
        self.server = None
        self.url = ""

    async def start(self) -> "RawPeer":
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.accepted += 1
            await reader.readuntil(b"\r\n\r\n")
            writer.write(self.answer)
            await asyncio.sleep(3600)  # black hole from here on

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        self.server.close()


async def proxy_for(endpoints, **settings):
    proxy = ProxyState(endpoints, ProxySettings(health_interval=0, engine_load_interval=0, **settings))
    return await start_server(proxy, "127.0.0.1", 0)


@pytest.mark.asyncio
async def test_a_prefill_that_never_answers_times_out_and_another_prefill_serves():
    silent = await RawPeer().start()
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decode = await FakeEngine("decode", kv_port=0).start()
    endpoints = [endpoint_from_url(silent.url, "prefill", "x"), endpoint_from_url(prefill.url, "prefill", "x"),
                 endpoint_from_url(decode.url, "decode", "x")]
    server, url = await proxy_for(endpoints, prefill_policy="round-robin", timeouts=BackendTimeouts(read=0.3))
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # round robin: one of the two reaches the silent prefill first
                async with session.post(url + "/v1/completions", json={"model": "m", "prompt": "p", "max_tokens": 3},
                                        timeout=aiohttp.ClientTimeout(total=5)) as answer:
                    assert answer.status == 200, await answer.text()
        assert silent.accepted >= 1
    finally:
        await server.cleanup()
        for peer in (silent, prefill, decode):
            await peer.stop()


@pytest.mark.asyncio
async def test_a_decode_that_stops_mid_stream_ends_the_clients_stream_with_an_error_event():
    first_event = b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n'
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%b\r\n" % (len(first_event), first_event))
    stalling = await RawPeer(head).start()
    prefill = await FakeEngine("prefill", kv_port=0).start()
    endpoints = [endpoint_from_url(prefill.url, "prefill", "x"), endpoint_from_url(stalling.url, "decode", "x")]
    server, url = await proxy_for(endpoints, timeouts=BackendTimeouts(read=0.4))
    try:
        async with aiohttp.ClientSession() as session:
            body = {"model": "m", "prompt": "p", "max_tokens": 8, "stream": True}
            async with session.post(url + "/v1/completions", json=body,
                                    timeout=aiohttp.ClientTimeout(total=5)) as answer:
                assert answer.status == 200
                payload = await answer.read()
        assert payload.startswith(first_event)
        assert b'"error"' in payload and b"timed out" in payload
    finally:
        await server.cleanup()
        for peer in (stalling, prefill):
            await peer.stop()


@pytest.mark.asyncio
async def test_a_half_sent_request_is_closed_after_the_read_timeout():
    async def handler(request: Request) -> Response:
        return Response(b"{}")

    server = HttpServer(handler, ServerLimits(max_body_bytes=1024, read_timeout=0.3))
    host, port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"half\":")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 3) == b""  # closed by the server, without an answer
        writer.close()
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_a_client_that_never_reads_is_cut_off_and_its_handler_stops():
    stopped = asyncio.get_running_loop().create_future()

    async def handler(request: Request):
        stream = request.stream()
        try:
            while True:
                await stream.write(b"x" * 1_000_000)
        except (ClientGone, asyncio.CancelledError) as exc:
            stopped.set_result(type(exc).__name__)
            raise

    server = HttpServer(handler, ServerLimits(max_body_bytes=1024, write_stall=0.3))
    host, port = await server.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read the answer
        await writer.drain()
        assert await asyncio.wait_for(stopped, 5) in ("ClientGone", "CancelledError")
        writer.close()
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_calls_to_a_backend_reuse_one_keep_alive_connection():
    engine = await FakeEngine("decode", kv_port=0).start()
    accepted = 0
    # a TCP relay in front of the engine counts the connections the client opens
    async def relay(reader, writer):
        nonlocal accepted
        accepted += 1
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", engine.port)

        async def pump(source, sink):
            while data := await source.read(65536):
                sink.write(data)
            sink.close()

        await asyncio.gather(pump(reader, upstream_writer), pump(upstream_reader, writer))

    counter = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = counter.sockets[0].getsockname()[1]
    client = HttpClient(CallTimeouts(connect=1, read=5, total=10))
    try:
        for _ in range(20):
            response = await client.request("GET", Target.parse(f"http://127.0.0.1:{port}/health"))
            assert response.status == 200
            await response.read()
            response.release()
        assert accepted == 1
    finally:
        await client.close()
        counter.close()
        await engine.stop()
