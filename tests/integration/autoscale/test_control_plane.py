"""The autoscaler's control plane over two real proxy replicas of two workers each (fake engines behind them): a
change reaches every worker of every replica before it returns, requests in flight and the workload are counted over
all of them, a replica that is down fails a change in bounded time naming it, one started again from nothing is
brought up to the table by the next reconcile, and a change never writes over one another writer made meanwhile."""

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from ascend_pd.autoscale.control_plane import ControlPlane
from ascend_pd.autoscale.proxy_admin import StepFailed, http_json
from ascend_pd.autoscale.stores import TableStore
from ascend_pd.proxy.backend_table import draining
from ascend_pd.proxy.endpoints import endpoint_from_url
from tests.fakes.vllm_api import Behaviour, FakeEngine, wait_healthy
from tests.ports import free_port

TOKEN = "s3cret"


class Replica:
    """`ascend-pd proxy --workers 2` in front of `engines`, with its own backend table file, as on its own node."""

    def __init__(self, engines: list[FakeEngine], table: Path):
        self.engines, self.table = engines, table
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> "Replica":
        argv = [sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--host", "127.0.0.1",
                "--port", self.url.rsplit(":", 1)[1], "--workers", "2", "--admin-token", TOKEN,
                "--health-interval", "0", "--engine-load-interval", "0", "--backend-table", str(self.table)]
        for engine in self.engines:
            argv += [f"--{engine.role}", engine.url]
        self.process = await asyncio.create_subprocess_exec(*argv, stderr=subprocess.DEVNULL)
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, self.url)
        return self

    async def stop(self) -> None:
        if self.process and self.process.returncode is None:
            self.process.terminate()
            await asyncio.wait_for(self.process.wait(), 15)


async def complete(url: str, prompt: str) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"model": "fake-model", "prompt": prompt, "max_tokens": 3, "stream": True}
        async with session.post(url + "/v1/completions", json=body) as answer:
            assert answer.status == 200, await answer.text()
            await answer.read()


@pytest_asyncio.fixture
async def deployment(tmp_path):
    engines = [await FakeEngine(role, kv_port=0, behaviour=Behaviour(token_delay=0.01)).start()
               for role in ("prefill", "decode", "decode")]
    replicas = [await Replica(engines, tmp_path / f"node-{i}" / "backends.json").start() for i in range(2)]
    plane = ControlPlane([r.url for r in replicas], TOKEN, TableStore(tmp_path / "bundle" / "backends.json"),
                         converge=5.0)
    yield engines, replicas, plane
    for replica in replicas:
        await replica.stop()
    for engine in engines:
        await engine.stop()


def endpoints(engines: list[FakeEngine]):
    return [endpoint_from_url(e.url, e.role, "--" + e.role) for e in engines]


@pytest.mark.asyncio
async def test_a_drain_reaches_every_worker_of_both_replicas_and_the_workload_counts_them_all(deployment):
    engines, replicas, plane = deployment
    _, drained, kept = engines
    await asyncio.to_thread(plane.drain, drained.url)  # returns once every worker serves it
    assert [plane.served_table(r.url)["worker_generations"] for r in replicas] == [[1, 1], [1, 1]]
    before = len(drained.received), len(kept.received)
    # one connection per request: the kernel spreads them over both workers of each replica
    await asyncio.gather(*(complete(replicas[i % 2].url, f"after the drain {i}") for i in range(40)))
    assert (len(drained.received) - before[0], len(kept.received) - before[1]) == (0, 40)
    seen = await asyncio.to_thread(plane.workload)
    assert seen["requests"] == 40 and seen["finished"] == 40 and seen["partial"] is True  # the workers just began
    backends = await asyncio.to_thread(plane.backends)
    assert backends[drained.url]["state"] == "draining" and backends[kept.url]["proxy_inflight"] == 0
    await asyncio.to_thread(plane.wait_idle, [drained.url, kept.url], 5.0)
    await asyncio.to_thread(plane.remove, drained.url)
    assert all(drained.url not in (b["url"] for b in plane.served_table(r.url)["backends"]) for r in replicas)


@pytest.mark.asyncio
async def test_requests_in_flight_on_either_replica_keep_a_drain_waiting(deployment):
    engines, replicas, plane = deployment
    prefill, slow, _ = engines
    slow.behaviour = Behaviour(token_delay=0.5)  # a 3-token answer takes 1.5 s
    await asyncio.to_thread(plane.remove, engines[2].url)  # every request goes to `slow`
    # one request through replica A, two through B: a drain that counted one replica's would see 1 or 2
    requests = asyncio.gather(*(complete(replica.url, f"slow {i}")
                                for i, replica in enumerate([replicas[0], replicas[1], replicas[1]])))
    deadline = time.monotonic() + 10  # on a busy box the requests may take more than a moment to reach `slow`
    while slow.active < 3:
        assert time.monotonic() < deadline, "the requests never reached the slow decode"
        await asyncio.sleep(0.02)
    await asyncio.to_thread(plane.drain, slow.url)
    with pytest.raises(StepFailed, match=re.escape(f"{{'{slow.url}': 3}}")):
        await asyncio.to_thread(plane.wait_idle, [slow.url], 0.3)
    await asyncio.to_thread(plane.wait_idle, [slow.url], 10.0)
    await requests


@pytest.mark.asyncio
async def test_a_replica_that_is_down_fails_a_change_in_bounded_time_and_names_itself(deployment, tmp_path):
    engines, replicas, _ = deployment
    dead = f"http://127.0.0.1:{free_port()}"
    plane = ControlPlane([replicas[0].url, dead], TOKEN, TableStore(tmp_path / "b2.json"), converge=1.0)
    started = time.monotonic()
    with pytest.raises(StepFailed) as failed:
        await asyncio.to_thread(plane.drain, engines[1].url)
    assert time.monotonic() - started < 1.0 + 3.0
    assert dead in str(failed.value) and "generation 1" in str(failed.value)
    # the replica that answered serves the change all the same, and the store holds it for a restart
    assert plane.served_table(replicas[0].url)["worker_generations"] == [1, 1]
    assert plane.store.read().generation == 1


@pytest.mark.asyncio
async def test_a_replica_started_again_from_nothing_is_brought_up_to_the_table_by_the_next_reconcile(deployment):
    engines, replicas, plane = deployment
    wanted = endpoints(engines[:2])  # the deployment without the second decode instance
    said = await asyncio.to_thread(plane.reconcile, wanted, "rev-a")
    assert said and "generation 1" in said
    assert await asyncio.to_thread(plane.reconcile, wanted, "rev-a") is None  # all agree now
    # replica B's node is replaced: a new process with no table file, serving its start-up flags (generation 0)
    await replicas[1].stop()
    replicas[1].table.unlink()
    await replicas[1].start()
    assert plane.served_table(replicas[1].url)["worker_generations"] == [0, 0]
    said = await asyncio.to_thread(plane.reconcile, wanted, "rev-a")
    assert said == f"backend table generation 1 pushed again to {[replicas[1].url]}"
    assert plane.served_table(replicas[1].url)["worker_generations"] == [1, 1]
    before = len(engines[2].received)
    await asyncio.gather(*(complete(replicas[1].url, f"after reconcile {i}") for i in range(20)))
    assert len(engines[2].received) == before  # B no longer routes to what the deployment dropped


@pytest.mark.asyncio
async def test_a_change_made_by_hand_on_one_replica_is_built_on_not_hidden_behind_an_equal_generation(deployment):
    engines, replicas, plane = deployment
    _, first, second = engines
    await asyncio.to_thread(plane.drain, first.url)  # generation 1 everywhere
    async with aiohttp.ClientSession() as session:  # an operator drains the other decode on replica A only
        async with session.post(replicas[0].url + "/admin/backends/drain", json={"url": second.url},
                                headers={"Authorization": f"Bearer {TOKEN}"}) as answer:
            assert answer.status == 200
    await asyncio.to_thread(plane.add, first.url, "decode")  # the autoscaler puts the first back in service
    for replica in replicas:
        served = plane.served_table(replica.url)
        assert served["worker_generations"] == [3, 3], served
        states = {e["url"]: e.get("draining", False) for e in served["backends"]}
        assert states[first.url] is False and states[second.url] is True  # the hand-made drain reached B too



def drain_by_hand(replica: Replica, url: str) -> None:
    """An operator's drain on one replica, through its admin API: a writer the autoscaler does not know of."""
    http_json("POST", replica.url + "/admin/backends/drain", {"url": url}, TOKEN)


@pytest.mark.asyncio
async def test_a_change_whose_table_another_writer_changed_meanwhile_is_redone_on_theirs_not_written_over_it(
        deployment):
    engines, replicas, plane = deployment
    _, first, second = engines
    made_from = []

    def drain_the_first(table):
        if not made_from:  # between the autoscaler's read and its write, an operator drains the second on replica A
            drain_by_hand(replicas[0], second.url)
        made_from.append(table.generation)
        return draining(table, first.url)

    published = await asyncio.to_thread(plane.change, drain_the_first)
    assert made_from == [0, 1]  # replica A refused a table made from generation 0 (409): redone on its generation 1
    assert published.generation == 2
    for replica in replicas:
        served = plane.served_table(replica.url)
        assert served["worker_generations"] == [2, 2], served
        assert {e["url"]: e.get("draining", False) for e in served["backends"]} == {
            engines[0].url: False, first.url: True, second.url: True}  # both drains, neither written over


@pytest.mark.asyncio
async def test_a_table_that_keeps_changing_under_a_change_stops_it_with_a_clear_error(deployment):
    engines, replicas, plane = deployment
    _, first, second = engines

    def always_raced(table):
        drain_by_hand(replicas[1], second.url)  # a new generation on replica B each time
        return draining(table, first.url)

    with pytest.raises(StepFailed, match="changed under 3 tries") as stopped:
        await asyncio.to_thread(plane.change, always_raced)
    assert "409" in str(stopped.value) and replicas[1].url in str(stopped.value)


@pytest.mark.asyncio
async def test_a_change_refused_by_the_second_replica_after_the_first_took_it_keeps_the_change_the_second_holds(
        deployment):
    engines, replicas, plane = deployment
    _, first, second = engines
    stored_between_tries = []

    def drain_the_first(table):
        if not stored_between_tries:  # between the read and the write, an operator drains the second on replica B
            drain_by_hand(replicas[1], second.url)
        stored_between_tries.append(plane.store.read())
        return draining(table, first.url)

    published = await asyncio.to_thread(plane.change, drain_the_first)
    # A took generation 1 (the first drained only), B refused it: its generation 1 holds the operator's drain. The
    # retry is made from B's table, not from A's of the same generation, which B would then take over its own.
    for replica in replicas:
        served = plane.served_table(replica.url)
        assert served["worker_generations"] == [2, 2], served
        assert {e["url"]: e.get("draining", False) for e in served["backends"]} == {
            engines[0].url: False, first.url: True, second.url: True}
    assert plane.store.read() == published
    # while B refused the first try, the store (what a restarted worker reads) never held a table without the
    # operator's drain
    assert stored_between_tries == [None, None]


@pytest.mark.asyncio
async def test_a_change_given_up_leaves_the_store_as_it_was_and_the_next_change_builds_on_the_refusing_replica(
        deployment):
    engines, replicas, plane = deployment
    prefill, first, second = engines
    operator_drains = [second.url, second.url, prefill.url]  # on replica B, one during each try

    def raced_on_b(table):
        drain_by_hand(replicas[1], operator_drains.pop(0))
        return draining(table, first.url)  # taken by A each time, refused by B

    with pytest.raises(StepFailed, match="changed under 3 tries"):
        await asyncio.to_thread(plane.change, raced_on_b)
    assert plane.store.read() is None  # no table B refused reached the store a restarted worker reads
    a, b = (plane.served_table(r.url) for r in replicas)
    assert a["generation"] == b["generation"] and a["backends"] != b["backends"]  # only B's holds the last drain
    await asyncio.to_thread(plane.add, first.url, "decode")
    for replica in replicas:
        states = {e["url"]: e.get("draining", False) for e in plane.served_table(replica.url)["backends"]}
        assert states == {prefill.url: True, first.url: False, second.url: True}, states  # both drains kept
