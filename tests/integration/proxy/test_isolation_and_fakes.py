"""What the proxy must not carry between clients (backend cookies), and how the fake engines tell a replayed
handoff from KV lost in a restart of P, which the soak test relies on."""

import aiohttp
import pytest
from aiohttp import web

from ascend_pd.proxy.app import Proxy, start_server
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.testing import FakeEngine

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
    proxy = Proxy([Endpoint(backend_url, "colocated", "c0")], ProxySettings(mode="colocated", health_interval=0))
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
