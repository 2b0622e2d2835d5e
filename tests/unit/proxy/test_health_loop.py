"""The health loop lives as long as the proxy: a probe that fails in a way nobody foresaw is logged once for its
kind, and every other backend goes on being probed."""

import asyncio
import logging

import aiohttp
import pytest
from aiohttp import web

from ascend_pd.proxy import health
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint


async def engine_counting_health_checks() -> tuple[web.AppRunner, str, list[int]]:
    checks: list[int] = []

    async def answer(request: web.Request) -> web.Response:
        checks.append(1)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/health", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}", checks


@pytest.mark.asyncio
async def test_a_probe_that_raises_something_unforeseen_leaves_the_loop_running_and_the_others_probed(
        monkeypatch, caplog):
    runner, url, checks = await engine_counting_health_checks()
    broken_url = "http://127.0.0.1:9"
    real_probe = health.probe

    async def probe(session, backend, timeout, busy_grace=0.0):
        if backend.url == broken_url:
            raise RuntimeError("a bug in the probe")
        return await real_probe(session, backend, timeout, busy_grace)

    monkeypatch.setattr(health, "probe", probe)
    pool = BackendPool(lambda: CircuitBreaker(3, 10.0))
    pool.add(Endpoint(broken_url, "decode", "broken"))  # first: probed first in every round
    pool.add(Endpoint(url, "decode", "healthy"))
    caplog.set_level(logging.ERROR, "ascend_pd.proxy.health")
    async with aiohttp.ClientSession() as session:
        loop = asyncio.create_task(health.check_forever(session, pool, interval=0.02, timeout=1.0))
        try:
            deadline = asyncio.get_running_loop().time() + 5.0
            while len(checks) < 5 and asyncio.get_running_loop().time() < deadline and not loop.done():
                await asyncio.sleep(0.02)
            assert not loop.done(), loop.exception()
            assert len(checks) >= 5  # the healthy backend is probed round after round
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
            await runner.cleanup()
    said = [r for r in caplog.records if r.name == "ascend_pd.proxy.health"]
    assert len(said) == 1, [r.getMessage() for r in said]  # once for its kind, not once a round
    assert broken_url in said[0].getMessage() and "RuntimeError" in said[0].getMessage()
