"""Engine load polling on real sockets: the fake engine's /metrics counts what it serves, the poller survives backends
that hang or are no vLLM, and two proxy processes sharing decode engines balance them as well as one proxy does,
which they do not when they route blind to each other."""

import asyncio
import itertools
import logging
import math
import sys

import aiohttp
import pytest
from aiohttp import web

from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.engine_load import parse_engine_load, poll_engine_load_forever
from tests.fakes.vllm_api import Behaviour, FakeEngine, wait_healthy
from tests.ports import free_port
from tests.integration.proxy.conftest import eventually

PROXY = [sys.executable, "-m", "ascend_pd.cli.main", "proxy"]
TOKEN_DELAY = 0.02  # seconds per output token on the fake decode engines
LONG_TOKENS, SHORT_TOKENS = 100, 4  # 2 s and 80 ms of decoding
WINDOW = 5.0  # seconds each routing setup is measured
POLL_INTERVAL = 0.1


async def engine_load_of(session: aiohttp.ClientSession, engine: FakeEngine):
    async with session.get(engine.url + "/metrics") as answer:
        return parse_engine_load(await answer.text())


@pytest.mark.asyncio
async def test_the_fake_engines_metrics_count_the_requests_it_is_serving():
    decode = await FakeEngine("decode", behaviour=Behaviour(token_delay=0.05, queue_delay=2.0)).start()
    streamed = {"prompt": "counted", "max_tokens": 40, "stream": True}
    queued = {"prompt": "queued", "max_tokens": 4, "kv_transfer_params": {"do_remote_prefill": True}}
    try:
        async with aiohttp.ClientSession() as session:
            assert (await engine_load_of(session, decode)).requests == 0
            calls = [asyncio.create_task(session.post(decode.url + "/v1/completions", json=body))
                     for body in (streamed, streamed, queued)]
            assert await eventually(lambda: decode.active == 3)
            async with session.get(decode.url + "/metrics") as answer:
                page = await answer.text()
            assert 'vllm:num_requests_running{engine="0",model_name="fake-model"} 2.0' in page
            assert 'vllm:num_requests_waiting{engine="0",model_name="fake-model"} 1.0' in page
            for call in calls:
                call.cancel()
            await asyncio.gather(*calls, return_exceptions=True)
            assert await eventually(lambda: decode.active == 0)
            assert (await engine_load_of(session, decode)).requests == 0
    finally:
        await decode.stop()


@pytest.mark.alone  # counts the reads a busy event loop gets done in 1.5 s
@pytest.mark.asyncio
async def test_the_poller_reads_every_engine_and_outlives_backends_that_hang_or_are_not_vllm(caplog):
    hung_reads = 0

    async def hang(request: web.Request) -> web.Response:
        nonlocal hung_reads
        hung_reads += 1
        await asyncio.sleep(3600)
        return web.Response()

    hung_app = web.Application()
    hung_app.router.add_get("/metrics", hang)
    hung = web.AppRunner(hung_app, shutdown_timeout=0.1)
    await hung.setup()
    hung_port = free_port()
    await web.TCPSite(hung, "127.0.0.1", hung_port).start()
    decode = await FakeEngine("decode", behaviour=Behaviour(token_delay=0.05)).start()
    not_vllm = await FakeEngine("decode").start()
    pool = BackendPool(lambda: CircuitBreaker(3, 10))
    for url in (decode.url, f"http://127.0.0.1:{hung_port}", not_vllm.url + "/v1", f"http://127.0.0.1:{free_port()}"):
        pool.add(Endpoint(url, "decode", url))
    caplog.set_level(logging.WARNING, "ascend_pd.proxy.engine_load")
    async with aiohttp.ClientSession() as session:
        stream = asyncio.create_task(session.post(decode.url + "/v1/completions",
                                                  json={"prompt": "p", "max_tokens": 100, "stream": True}))
        poller = asyncio.create_task(poll_engine_load_forever(session, pool, interval=0.1, timeout=0.35))
        try:
            assert await eventually(lambda: getattr(pool.get(decode.url).engine, "requests", None) == 1)
            await asyncio.sleep(1.5)
            assert not poller.done()
            assert [b.engine for b in pool.all()[1:]] == [None, None, None]
            # each read of the hung backend takes its whole timeout, and no new one starts while one runs: at most
            # one per 0.35 s, not one per 0.1 s
            assert 2 <= hung_reads <= 6
            # the poller's own: a thread another test left running may log too
            warnings = [r.getMessage() for r in caplog.records if r.name == "ascend_pd.proxy.engine_load"]
            assert len(warnings) == 3  # once per failing backend, not once per poll
            assert any("no answer within 0.35 s" in w for w in warnings)
            assert any("HTTP 404" in w for w in warnings)
        finally:
            poller.cancel()
            stream.cancel()
            await asyncio.gather(poller, stream, return_exceptions=True)
            await hung.cleanup()
            await decode.stop()
            await not_vllm.stop()


async def start_proxy(prefill: FakeEngine, decodes: list[FakeEngine], interval: float, log) -> tuple[object, str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *PROXY, "--prefill", prefill.url, *itertools.chain(*(("--decode", d.url) for d in decodes)),
        "--host", "127.0.0.1", "--port", str(port), "--health-interval", "0", "--engine-load-interval", str(interval),
        "--public-detail", stdout=log, stderr=log)
    return process, f"http://127.0.0.1:{port}"


async def closed_loop(session: aiohttp.ClientSession, url: str, name: str, max_tokens: int) -> None:
    """One client sending a request as soon as its previous answer ends: one request in flight, always."""
    for index in itertools.count():
        body = {"model": "fake-model", "prompt": f"{name} request number {index}", "max_tokens": max_tokens,
                "stream": True}
        async with session.post(url + "/v1/completions", json=body) as answer:
            await answer.read()


async def decode_balance(session, decodes: list[FakeEngine], long_url: str, short_url: str) -> float:
    """Drive one long-request client through `long_url` and one short-request client through `short_url`, and
    sample the requests each decode engine serves: the busiest engine's count if the requests were spread as evenly
    as possible, over its actual count, summed over the window. 1.0: as even as it can be at every moment; 0.5:
    both requests on one of the two engines all along."""
    loop = asyncio.get_running_loop()
    clients = [asyncio.create_task(closed_loop(session, long_url, "long", LONG_TOKENS)),
               asyncio.create_task(closed_loop(session, short_url, "short", SHORT_TOKENS))]
    even = busiest = 0
    deadline = loop.time() + WINDOW
    while loop.time() < deadline:
        counts = [engine.active for engine in decodes]
        if any(counts):
            even += math.ceil(sum(counts) / len(counts))
            busiest += max(counts)
        await asyncio.sleep(0.01)
    for client in clients:
        client.cancel()
    await asyncio.gather(*clients, return_exceptions=True)
    assert await eventually(lambda: not any(engine.active for engine in decodes))
    return even / busiest


@pytest.mark.asyncio
async def test_two_proxy_replicas_balance_shared_engines_like_one_proxy_only_when_they_read_engine_load(tmp_path):
    """Replica A carries long requests, replica B short ones, one at a time each. Blind, each sees both decode
    engines idle whenever it routes, so B lands on A's engine half the time; reading the engines' load, B sees A's
    request there and goes to the other engine, as a single proxy carrying both clients does."""
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decodes = [await FakeEngine("decode", kv_port=0, behaviour=Behaviour(token_delay=TOKEN_DELAY)).start()
               for _ in range(2)]
    with open(tmp_path / "proxies.log", "wb") as log:
        started = [await start_proxy(prefill, decodes, interval, log)
                   for interval in (POLL_INTERVAL, POLL_INTERVAL, 0, 0)]
        (_, polling_a), (_, polling_b), (_, blind_a), (_, blind_b) = started
        try:
            async with aiohttp.ClientSession() as session:
                for _, url in started:
                    await wait_healthy(session, url)
                one = await decode_balance(session, decodes, polling_a, polling_a)
                polling = await decode_balance(session, decodes, polling_a, polling_b)
                blind = await decode_balance(session, decodes, blind_a, blind_b)
                async with session.get(polling_b + "/health") as answer:
                    shown = [b["engine"] for b in (await answer.json())["backends"]]
                async with session.get(blind_b + "/health") as answer:
                    shown_blind = [b["engine"] for b in (await answer.json())["backends"]]
        finally:
            for process, _ in started:
                process.terminate()
            for process, _ in started:
                await process.wait()
            for engine in [prefill, *decodes]:
                await engine.stop()
    print(f"decode balance: one proxy {one:.3f}, two replicas reading engine load {polling:.3f}, "
          f"two blind replicas {blind:.3f}")
    assert all(reading is not None for reading in shown) and shown_blind == [None, None, None]
    assert polling >= 0.9 * one
    assert blind <= 0.85 * one
