"""Fake vLLM engines and a real proxy on loopback sockets, started per test."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest_asyncio

from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.endpoints import Endpoint, KVAddress
from ascend_pd.proxy.settings import ProxySettings
from tests.fakes.vllm_api import Behaviour, FakeEngine
from tests.ports import free_port


class Rig:
    """P, D (or colocated) fake engines, a proxy in front of them, and a client session."""

    def __init__(self):
        self.prefills: list[FakeEngine] = []
        self.decodes: list[FakeEngine] = []
        self.colocated: list[FakeEngine] = []
        self.runner = None
        self.url = ""
        self.proxy: ProxyState | None = None
        self.session: aiohttp.ClientSession | None = None

    async def start(self, prefills=1, decodes=1, colocated=0, behaviour=None, **settings) -> "Rig":
        for role, count, engines in (("prefill", prefills, self.prefills), ("decode", decodes, self.decodes),
                                     ("colocated", colocated, self.colocated)):
            for _ in range(count):
                engines.append(await FakeEngine(role, kv_port=0, behaviour=behaviour or Behaviour()).start())
        settings.setdefault("health_interval", 0)
        settings.setdefault("breaker_failures", 3)
        settings.setdefault("public_detail", True)  # tests read /health's backends and /metrics without a token
        mode = settings.setdefault("mode", "pull" if prefills else "colocated")
        endpoints = [_endpoint(e) for e in self.prefills + self.decodes + self.colocated]
        if mode == "layerwise":  # the metaserver URL must be known before the proxy starts: take a free port
            port = free_port()
            settings["metaserver_url"] = f"http://127.0.0.1:{port}/v1/metaserver"
        else:
            port = 0
        self.proxy = ProxyState(endpoints, ProxySettings(**settings))
        self.runner, self.url = await start_server(self.proxy, "127.0.0.1", port)
        self.session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        await self.session.close()
        await self.runner.cleanup()
        for engine in self.prefills + self.decodes + self.colocated:
            await engine.stop()

    async def post(self, body: dict, path: str = "/v1/completions", base: str | None = None) -> tuple[int, bytes]:
        async with self.session.post((base or self.url) + path, json=body) as response:
            payload = await response.read()
            assert not (response.status == 200 and not payload), "a 200 must never have an empty body"
            return response.status, payload

    async def metrics(self) -> str:
        async with self.session.get(self.url + "/metrics") as response:
            return await response.text()


def _endpoint(engine: FakeEngine) -> Endpoint:
    kv = KVAddress(engine.engine_id, engine.host, engine.kv_port, tp_size=1, dp_rank=0)
    return Endpoint(engine.url, engine.role, engine.engine_id, kv=kv)


@pytest_asyncio.fixture
async def rig():
    made = Rig()
    yield made
    if made.session is not None:
        await made.stop()


async def eventually(predicate, timeout: float = 5.0) -> bool:
    """Poll until `predicate()` holds (True) or `timeout` seconds pass (False); the box may be busy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True
