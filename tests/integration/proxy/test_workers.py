"""`ascend-pd proxy --workers 2` as a real process tree: two workers on one port act as one proxy. Requests spread
over both, routing sees both workers' load, an admin change reaches both, vllm-ascend's D finds the worker whose
request waits for its block coordinates, /metrics counts for both, and a worker that dies is replaced."""

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.vllm_api import Behaviour, FakeEngine, wait_healthy
from tests.integration.proxy.conftest import eventually
from tests.ports import free_port

PROXY = [sys.executable, "-m", "ascend_pd.cli.main", "proxy"]
ADMIN = {"Authorization": "Bearer s3cret"}


def children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").glob("*")
            for child in (task / "children").read_text().split()]


class Workers:
    def __init__(self, engines: list[FakeEngine], *extra: str, workers: int = 2):
        self.engines = engines
        self.workers = workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [*PROXY, "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(workers),
                     "--admin-token", "s3cret", "--health-interval", "0", "--engine-load-interval", "0", *extra]
        for engine in engines:
            self.args += [f"--{engine.role}", engine.url]
        self.process = None

    async def __aenter__(self) -> "Workers":
        self.process = await asyncio.create_subprocess_exec(*self.args, stderr=subprocess.PIPE)
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, self.url)
        # every worker listens before the test starts
        assert await eventually(lambda: len(children(self.process.pid)) == self.workers), "workers did not start"
        return self

    async def __aexit__(self, *exc) -> None:
        self.process.terminate()
        assert await asyncio.wait_for(self.process.wait(), 15) == 0  # every worker stopped, cleanly
        for engine in self.engines:
            await engine.stop()

    async def complete(self, prompt: str = "hello workers", max_tokens: int = 4, stream: bool = True) -> bytes:
        """One request on a connection of its own, so the kernel may hand it to either worker."""
        async with aiohttp.ClientSession() as session:
            body = {"model": "fake-model", "prompt": prompt, "max_tokens": max_tokens, "stream": stream}
            async with session.post(self.url + "/v1/completions", json=body) as answer:
                payload = await answer.read()
                assert answer.status == 200, payload
                return payload


async def engines(prefills=1, decodes=2, behaviour=None) -> list[FakeEngine]:
    started = []
    for role, count in (("prefill", prefills), ("decode", decodes)):
        for _ in range(count):
            started.append(await FakeEngine(role, kv_port=0, behaviour=behaviour or Behaviour()).start())
    return started


async def served_by_worker(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(url + "/metrics", headers=ADMIN) as answer:
            text = await answer.text()
    counts = {}
    for line in text.splitlines():
        if line.startswith("ascend_pd_proxy_requests_total{"):
            counts[line.split("{", 1)[1].split("}")[0]] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.asyncio
async def test_two_workers_serve_one_port_and_their_metrics_count_every_request():
    async with Workers(await engines()) as proxy:
        answers = await asyncio.gather(*(proxy.complete(f"prompt {i}") for i in range(40)))
        assert all(b"[DONE]" in answer for answer in answers)
        counts = await served_by_worker(proxy.url)
        assert counts == {'endpoint="/v1/completions",outcome="200"': 40.0}


@pytest.mark.asyncio
async def test_routing_sees_the_other_workers_requests():
    """Two long streams, the second started while the first runs: whichever worker takes the second must see the
    first on its decode engine and pick the other one. Workers blind to each other collide half the time."""
    slow = Behaviour(token_delay=0.05)
    started = await engines(decodes=2, behaviour=slow)
    decodes = [engine for engine in started if engine.role == "decode"]
    async with Workers(started, "--decode-policy", "least-loaded") as proxy:
        for _ in range(8):
            before = [len(engine.received) for engine in decodes]
            first = asyncio.ensure_future(proxy.complete(max_tokens=10))
            assert await eventually(lambda: sum(len(e.received) for e in decodes) > sum(before)), \
                "the first stream reached no decode engine"
            await proxy.complete(max_tokens=2)
            await first
            assert [len(engine.received) - count for engine, count in zip(decodes, before)] == [1, 1]


@pytest.mark.asyncio
async def test_an_admin_drain_on_one_worker_reaches_the_other():
    started = await engines(decodes=2)
    drained, kept = [engine for engine in started if engine.role == "decode"]
    async with Workers(started) as proxy:
        async with aiohttp.ClientSession() as session:
            async with session.post(proxy.url + "/admin/backends/drain", json={"url": drained.url},
                                    headers=ADMIN) as answer:
                assert answer.status == 200, await answer.text()
        before = len(drained.received)
        await asyncio.gather(*(proxy.complete(f"after the drain {i}") for i in range(30)))
        assert len(drained.received) == before
        assert len(kept.received) >= 30


@pytest.mark.asyncio
async def test_layerwise_d_finds_the_worker_whose_request_waits_for_its_blocks():
    proxy = Workers(await engines(decodes=1), "--mode", "layerwise")
    proxy.args += ["--advertise-url", proxy.url]
    async with proxy:
        answers = await asyncio.gather(*(proxy.complete(f"layerwise {i}", max_tokens=3) for i in range(20)))
        assert all(b"[DONE]" in answer for answer in answers)


@pytest.mark.asyncio
async def test_a_worker_that_dies_is_replaced_and_the_port_keeps_serving():
    async with Workers(await engines()) as proxy:
        victim = children(proxy.process.pid)[0]
        os.kill(victim, signal.SIGKILL)
        assert await eventually(lambda: len(now := children(proxy.process.pid)) == 2 and victim not in now), \
            "the killed worker was not replaced"
        answers = await asyncio.gather(*(proxy.complete(f"after the kill {i}") for i in range(20)))
        assert all(b"[DONE]" in answer for answer in answers)


@pytest.mark.asyncio
async def test_workers_stop_when_their_supervisor_is_killed():
    """`kill -9` of the proxy must not leave workers serving the port with a stale view of the backends."""
    proxy = Workers(await engines())
    await proxy.__aenter__()
    try:
        workers = children(proxy.process.pid)
        assert len(workers) == 2
        proxy.process.kill()
        await proxy.process.wait()
        assert await eventually(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers)), \
            "workers outlived their supervisor"
    finally:
        for engine in proxy.engines:
            await engine.stop()


@pytest.mark.asyncio
async def test_the_workload_window_counts_every_workers_requests():
    async with Workers(await engines()) as proxy:
        await asyncio.gather(*(proxy.complete(f"prompt {i}", max_tokens=5) for i in range(30)))
        async with aiohttp.ClientSession() as session:
            async with session.get(proxy.url + "/v1/workload", headers=ADMIN) as answer:
                assert answer.status == 200
                seen = await answer.json()
    assert seen["requests"] == 30 and seen["output_tokens"]["mean"] == 5 and seen["streamed"] == 30


async def admin(proxy: Workers, method: str, path: str, body=None) -> dict:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, proxy.url + path, json=body, headers=ADMIN) as answer:
            assert answer.status == 200, await answer.text()
            return await answer.json()


async def routed_after(proxy: Workers, drained: FakeEngine, kept: FakeEngine, label: str) -> tuple[int, int]:
    """Requests the drained and the kept decode engine received for 30 requests spread over both workers."""
    before = len(drained.received), len(kept.received)
    await asyncio.gather(*(proxy.complete(f"{label} {i}") for i in range(30)))
    return len(drained.received) - before[0], len(kept.received) - before[1]


@pytest.mark.asyncio
@pytest.mark.parametrize("table_file", [True, False], ids=["with-table-file", "siblings-only"])
async def test_a_drain_outlives_the_restart_of_a_worker(tmp_path, table_file):
    """Before the backend table, a worker started again rebuilt its backends from the start-up flags and sent
    requests to the drained backend again. It now takes the table from the file, or from its sibling."""
    started = await engines(decodes=2)
    drained, kept = [engine for engine in started if engine.role == "decode"]
    extra = ["--backend-table", str(tmp_path / "backends.json")] if table_file else []
    async with Workers(started, *extra) as proxy:
        await admin(proxy, "POST", "/admin/backends/drain", {"url": drained.url})
        for victim in children(proxy.process.pid):  # one after the other: every worker is a restarted one
            os.kill(victim, signal.SIGKILL)
            assert await eventually(lambda: len(now := children(proxy.process.pid)) == 2 and victim not in now), \
                "the killed worker was not replaced"
            await wait_until_listening(proxy)
            assert await routed_after(proxy, drained, kept, f"after killing {victim}") == (0, 30)
        table = await admin(proxy, "GET", "/admin/table")
        assert table["worker_generations"] == [1, 1], table
        assert [e.get("draining", False) for e in table["backends"] if e["url"] == drained.url] == [True]


async def wait_until_listening(proxy: Workers) -> None:
    async with aiohttp.ClientSession() as session:
        await wait_healthy(session, proxy.url)
    # the replaced worker answers its siblings once its private port is up: the table says it serves
    assert await eventually_async(lambda: _all_answer(proxy)), "a worker does not answer its siblings"


async def _all_answer(proxy: Workers) -> bool:
    async with aiohttp.ClientSession() as session:
        async with session.get(proxy.url + "/admin/table", headers=ADMIN) as answer:
            return answer.status == 200 and -1 not in (await answer.json())["worker_generations"]


async def eventually_async(check, seconds: float = 10.0) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.asyncio
async def test_a_pushed_table_reaches_every_worker_and_an_older_one_changes_nothing(tmp_path):
    started = await engines(decodes=2)
    first, second = [engine for engine in started if engine.role == "decode"]
    prefill = next(engine for engine in started if engine.role == "prefill")
    table_file = tmp_path / "backends.json"
    async with Workers(started, "--backend-table", str(table_file)) as proxy:
        only_second = {"generation": 5, "revision": "test", "backends": [
            {"url": prefill.url, "role": "prefill"}, {"url": second.url, "role": "decode"}]}
        assert (await admin(proxy, "PUT", "/admin/table", {**only_second, "expected_generation": 0}))["applied"]
        assert await routed_after(proxy, first, second, "generation 5") == (0, 30)
        stale = {**only_second, "generation": 4, "expected_generation": 0, "backends": [
            {"url": prefill.url, "role": "prefill"}, {"url": first.url, "role": "decode"}]}
        async with aiohttp.ClientSession() as session:  # made from generation 0: it would undo generation 5
            async with session.put(proxy.url + "/admin/table", json=stale, headers=ADMIN) as answer:
                assert answer.status == 409 and (await answer.json())["generation"] == 5
        assert await routed_after(proxy, first, second, "stale generation 4") == (0, 30)
        assert (await admin(proxy, "GET", "/admin/table"))["worker_generations"] == [5, 5]
        assert json.loads(table_file.read_text())["generation"] == 5  # what a restarted worker will read
        # a newer table written to the file (as the kubelet refreshes a ConfigMap) is taken up by every worker
        table_file.write_text(json.dumps({**only_second, "generation": 6, "backends": [
            {"url": prefill.url, "role": "prefill"}, {"url": first.url, "role": "decode"}]}))
        assert await eventually_async(lambda: _generations_are(proxy, [6, 6])), "the file's table was not taken up"
        assert await routed_after(proxy, first, second, "generation 6") == (30, 0)


async def _generations_are(proxy: Workers, expected: list[int]) -> bool:
    async with aiohttp.ClientSession() as session:
        async with session.get(proxy.url + "/admin/table", headers=ADMIN) as answer:
            return (await answer.json())["worker_generations"] == expected
