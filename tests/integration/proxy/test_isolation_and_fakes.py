"""What the proxy must not carry between clients (backend cookies), when a stream ends for the client and for the
load accounting, and how the fake engines tell a replayed handoff from KV lost in a restart of P (the soak test
relies on it)."""

import asyncio

import aiohttp
import pytest
from aiohttp import web

from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.settings import ProxySettings
from tests.fakes.vllm_api import FakeEngine
from tests.integration.proxy.conftest import eventually

pytestmark = pytest.mark.asyncio

BODY = {"model": "fake-model", "prompt": "one two three four", "max_tokens": 4}


async def test_a_cookie_one_backend_answer_sets_never_reaches_the_backend_again():
    cookies_seen = []

    async def complete(request: web.Request) -> web.Response:
        cookies_seen.append(request.headers.get("Cookie"))
        response = web.json_response({"choices": [{"index": 0, "text": " w1", "finish_reason": "length"}]})
        response.set_cookie("session", "client-one")
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    backend = web.AppRunner(app)
    await backend.setup()
    site = web.TCPSite(backend, "127.0.0.1", 0)
    await site.start()
    # by host name: aiohttp's default cookie jar ignores cookies from IP addresses
    backend_url = f"http://localhost:{backend.addresses[0][1]}"
    proxy = ProxyState([Endpoint(backend_url, "colocated", "c0")], ProxySettings(mode="colocated", health_interval=0))
    runner, url = await start_server(proxy, "127.0.0.1", 0)
    try:
        for _ in range(2):  # two clients, each with a session of its own
            async with aiohttp.ClientSession() as client:
                async with client.post(url + "/v1/completions", json=BODY) as answer:
                    assert answer.status == 200
        assert cookies_seen == [None, None]
    finally:
        await runner.cleanup()
        await backend.cleanup()


async def read_kv(session: aiohttp.ClientSession, decode: FakeEngine, params: dict) -> tuple[int, bytes]:
    body = {**BODY, "kv_transfer_params": params}
    async with session.post(decode.url + "/v1/completions", json=body) as answer:
        return answer.status, await answer.read()


async def prefill_params(session: aiohttp.ClientSession, prefill: FakeEngine) -> dict:
    body = {**BODY, "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
    async with session.post(prefill.url + "/v1/completions", json=body) as answer:
        return (await answer.json())["kv_transfer_params"]


async def test_fake_decode_counts_a_replayed_handoff_as_a_stale_read():
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decode = await FakeEngine("decode", kv_port=0).start()
    try:
        async with aiohttp.ClientSession() as session:
            params = await prefill_params(session, prefill)
            assert (await read_kv(session, decode, params))[0] == 200
            status, _ = await read_kv(session, decode, params)  # the same kv_transfer_params again
        assert status == 200  # as vLLM: an answer from whatever the blocks hold now
        assert decode.stale_reads == 1 and decode.lost_kv_reads == 0
    finally:
        await prefill.stop()
        await decode.stop()


async def test_fake_decode_fails_the_transfer_when_prefill_restarted_after_prefilling():
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decode = await FakeEngine("decode", kv_port=0).start()
    try:
        async with aiohttp.ClientSession() as session:
            params = await prefill_params(session, prefill)
            await prefill.stop()
            await prefill.start()  # same port, its held KV gone
            status, _ = await read_kv(session, decode, params)
        assert status == 500
        assert decode.lost_kv_reads == 1 and decode.stale_reads == 0
    finally:
        await prefill.stop()
        await decode.stop()


async def test_a_stream_is_complete_for_the_client_at_done_but_its_load_is_held_until_the_backend_ends():
    backend_may_end = asyncio.Event()
    events = [b'data: {"choices":[{"index":0,"text":" w1"}]}\n\n', b"data: [DONE]\n\n"]

    async def complete(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
        await backend_may_end.wait()  # a backend slow to close its body after [DONE]
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    backend = web.AppRunner(app)
    await backend.setup()
    await web.TCPSite(backend, "127.0.0.1", 0).start()
    backend_url = f"http://127.0.0.1:{backend.addresses[0][1]}"
    proxy = ProxyState([Endpoint(backend_url, "colocated", "c0")], ProxySettings(mode="colocated", health_interval=0))
    runner, url = await start_server(proxy, "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as client:
            async with client.post(url + "/v1/completions", json={**BODY, "stream": True}) as answer:
                # would hang if the proxy waited for the backend's end of body before ending the client's
                received = await asyncio.wait_for(answer.read(), 10)
            assert received == b"".join(events)
            held = proxy.pool.get(backend_url)
            assert held.inflight == 1  # the backend's answer is not over yet: its load stays accounted
            backend_may_end.set()
            assert await eventually(lambda: held.inflight == 0 and held.load_tokens == 0)
            async with client.post(url + "/v1/completions", json={**BODY, "stream": True}) as answer:
                assert await answer.read() == b"".join(events)  # the pooled connection is still good
    finally:
        backend_may_end.set()
        await runner.cleanup()
        await backend.cleanup()
