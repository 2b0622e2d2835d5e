"""The closed loop on the local-cpu cluster: the real proxy, the real rendered launch scripts, engines paced by the
cost model, a seeded Poisson load, and the autoscaler changing the deployment while requests flow."""

import asyncio
import statistics

import pytest
import pytest_asyncio

from ascend_pd.planner.resize import counts_of
from .closed_loop import CHAT, RAG, ClosedLoop, LoadResult, Traffic, offer, planned

# Alone but for unit tests: the autoscaler sizes the deployment from the latencies it measures, which another test's
# processes would lengthen; a unit test in the other worker takes one core and leaves this loop the other (beside a busy
# core the corrections it measured were within 0.04 of those alone). Every loop's engines listen on the planner's HTTP
# ports (8100...). One xdist group: pytest-xdist hands groups out before single tests, so the loop starts while the
# other worker has unit tests to run beside it.
pytestmark = [pytest.mark.asyncio, pytest.mark.alone_but_for_unit_tests, pytest.mark.xdist_group("closed-loop")]
INTERVAL = 5.0
WINDOW = 10.0  # two intervals: a rate over ~20-40 arrivals, so a shift shows within two intervals
# Steady load is judged over a window of four intervals: a 10 s window's count of ~42 Poisson arrivals swings by a
# quarter either way, as far as the edges of the band where 1 P + 2 D stays the plan (which move with the correction)
STEADY_WINDOW = 20.0


@pytest_asyncio.fixture
async def loop_for(tmp_path):
    made = []

    async def start(traffic: Traffic, interval: float = INTERVAL, window: float = WINDOW) -> ClosedLoop:
        rig = ClosedLoop(tmp_path, traffic, interval, window)
        made.append(rig)
        await rig.start()
        return rig

    yield start
    for rig in made:
        await rig.stop()


async def test_a_shift_to_long_prompts_moves_capacity_from_decode_to_prefill(loop_for):
    rig = await loop_for(CHAT)
    assert rig.counts() == counts_of(planned(CHAT))  # 1 P + 2 D
    scaler = rig.autoscaler()
    load = LoadResult()
    chat = asyncio.ensure_future(offer(rig.url, CHAT, 2 * INTERVAL, load, seed=1))
    assert await rig.intervals(scaler, 2) == ["hold", "hold"]
    rag = asyncio.ensure_future(offer(rig.url, RAG, 4 * INTERVAL, load, seed=2))  # as the chat traffic ends
    await rig.intervals(scaler, 3)
    await asyncio.gather(chat, rag)
    want = counts_of(planned(RAG))  # 2 P + 1 D: a decode instance became a prefill one
    assert rig.counts() == want, rig.log_text()
    assert load.failures == [] and load.sent > 60


async def test_a_higher_rate_adds_instances(loop_for):
    # 1.4 times the chat rate: past what 1 P + 2 D carry, within what the four CPU devices do once the loop has
    # measured the paced engines (about 30% slower than the cost model on this box)
    higher = Traffic(CHAT.prompt_tokens, CHAT.output_tokens, 1.4 * CHAT.rate)
    rig = await loop_for(CHAT)
    start = rig.counts()
    scaler = rig.autoscaler()
    load = LoadResult()
    first = asyncio.ensure_future(offer(rig.url, CHAT, INTERVAL, load, seed=3))
    await rig.intervals(scaler, 1)
    second = asyncio.ensure_future(offer(rig.url, higher, 4 * INTERVAL, load, seed=4))
    await rig.intervals(scaler, 3)
    await asyncio.gather(first, second)
    assert sum(rig.counts().values()) > sum(start.values()), rig.log_text()
    assert rig.counts() == counts_of(planned(higher)), rig.log_text()  # 1 P + 3 D
    assert load.failures == []


async def test_steady_noisy_load_changes_nothing_over_twenty_intervals(loop_for):
    rig = await loop_for(CHAT, window=STEADY_WINDOW)
    start = rig.counts()
    scaler = rig.autoscaler()
    load = LoadResult()
    await asyncio.gather(offer(rig.url, CHAT, 20 * INTERVAL, load, seed=5), rig.intervals(scaler, 20))
    assert {d for d, _ in rig.decisions} <= {"hold", "wait"}, rig.log_text()
    assert rig.counts() == start
    rates = [line["observed_rate_rps"] for line in rig.log.lines if line.get("phase") == "decision"
             and "observed_rate_rps" in line]
    assert len(rates) >= 18 and statistics.pstdev(rates) / statistics.mean(rates) > 0.05  # the load was noisy
    assert load.failures == []
