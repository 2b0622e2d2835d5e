"""Failure paths over real sockets: retries, failover, re-prefill, cancellation, overload, broken streams."""

import asyncio

import msgspec
import pytest

from ascend_pd.proxy.settings import BackendTimeouts
from tests.fakes.vllm_api import Behaviour
from tests.integration.proxy.conftest import eventually

pytestmark = pytest.mark.asyncio

BODY = {"model": "fake-model", "prompt": "one two three four", "max_tokens": 8}


def served_by(engine) -> int:
    return len(engine.received)


async def test_failed_prefill_is_retried_on_another_prefill(rig):
    await rig.start(prefills=2, prefill_policy="round-robin")
    broken, healthy = rig.prefills
    broken.fail_next(1)
    statuses = [(await rig.post(BODY))[0] for _ in range(4)]
    assert statuses == [200] * 4
    assert served_by(broken) + served_by(healthy) == 5  # one extra call: the retry
    assert rig.decodes[0].stale_reads == 0 and rig.decodes[0].recomputes == 0
    assert 'ascend_pd_proxy_retries_total{kind="prefill"} 1.0' in await rig.metrics()


async def test_prefill_answer_without_kv_params_is_no_failure_and_decode_computes_the_prompt(rig, caplog):
    """A 200 without kv_transfer_params (a P that is no kv_producer, an older vLLM) is not retried and opens no
    breaker: D computes the prompt itself, and the proxy says so in its log and metrics."""
    await rig.start(prefills=2, breaker_failures=1)
    for prefill in rig.prefills:
        prefill.omit_kv_params_next()
    status, proxied = await rig.post(BODY)
    assert status == 200
    assert served_by(rig.prefills[0]) + served_by(rig.prefills[1]) == 1
    assert "kv_transfer_params" not in rig.decodes[0].received[0] and rig.decodes[0].recomputes == 1
    _, direct = await rig.post(BODY, base=rig.decodes[0].url)
    assert msgspec.json.decode(proxied)["choices"] == msgspec.json.decode(direct)["choices"]
    assert all(b.breaker.state == "closed" for b in rig.proxy.pool.all())
    metrics = await rig.metrics()
    assert 'ascend_pd_proxy_prefill_without_kv_params_total{outcome="recomputed"} 1.0' in metrics
    assert "ascend_pd_proxy_retries_total{" not in metrics
    assert any("without kv_transfer_params" in r.message and "computes the prompt" in r.message
               for r in caplog.records if r.levelname == "WARNING")


async def test_when_prefill_fails_decode_is_never_called(rig):
    await rig.start(prefills=1, prefill_attempts=3)
    rig.prefills[0].fail_next(10)
    status, body = await rig.post({**BODY, "stream": True})
    assert status == 502
    assert msgspec.json.decode(body)["error"]["type"] == "upstream_error"
    assert rig.decodes[0].received == []


async def test_a_request_the_prefill_refuses_is_passed_back_not_retried(rig):
    await rig.start(prefills=2)
    for engine in rig.prefills:
        engine.fail_next(1, status=400)
    status, _ = await rig.post(BODY)
    assert status == 400
    assert served_by(rig.prefills[0]) + served_by(rig.prefills[1]) == 1


async def test_dead_prefill_is_removed_by_health_checks_and_traffic_continues(rig):
    await rig.start(prefills=2, health_interval=0.05, breaker_failures=2, timeouts=BackendTimeouts(health=0.2))
    dead, alive = rig.prefills
    await dead.stop()
    assert await eventually(lambda: not rig.proxy.pool.get(dead.url).routable())
    statuses = [(await rig.post(BODY))[0] for _ in range(20)]
    assert statuses == [200] * 20
    assert served_by(alive) == 20
    assert 'ascend_pd_proxy_backend_failures_total{' not in await rig.metrics()  # no request ever hit the dead one


async def test_a_decode_slow_to_answer_health_stays_in_service_while_it_streams_and_not_after(rig):
    """An engine busy on a loaded host answers /health late: the proxy keeps routing to it while its tokens flow,
    and once nothing more comes from it the same silence takes it out of service (as a black hole would be)."""
    await rig.start(health_interval=0.2, breaker_failures=2, timeouts=BackendTimeouts(health=0.2))
    decode = rig.decodes[0]
    decode.behaviour = Behaviour(token_delay=0.05, health_delay=3600)
    backend = rig.proxy.pool.get(decode.url)
    streaming = asyncio.ensure_future(rig.post({**BODY, "max_tokens": 60, "stream": True}))  # 3 s of tokens
    assert await eventually(lambda: decode.active == 1)
    routable = []
    for _ in range(15):  # probes time out about every 0.4 s meanwhile
        await asyncio.sleep(0.1)
        routable.append(backend.routable())
    assert all(routable), routable
    assert (await rig.post(BODY))[0] == 200
    assert (await streaming)[0] == 200
    assert await eventually(lambda: not backend.routable())
    status, body = await rig.post(BODY)
    assert status == 503 and b"no healthy decode backend" in body


async def test_no_prefill_runs_while_no_decode_could_take_the_handoff(rig):
    """P would hold the prompt's KV for a D that never comes, until its abort timeout: it is not asked at all."""
    await rig.start(health_interval=0.05, breaker_failures=1, timeouts=BackendTimeouts(health=0.2))
    await rig.decodes[0].stop()
    assert await eventually(lambda: not rig.proxy.pool.get(rig.decodes[0].url).routable())
    status, body = await rig.post(BODY)
    assert status == 503 and b"no healthy decode backend" in body
    assert rig.prefills[0].received == []


async def test_decode_failing_before_its_first_token_means_a_fresh_prefill_on_a_new_pair(rig):
    await rig.start(prefills=2, decodes=2, decode_policy="round-robin")
    failing, healthy = rig.decodes
    failing.fail_next(100)
    statuses = [(await rig.post({**BODY, "stream": True}))[0] for _ in range(6)]
    assert statuses == [200] * 6
    handed_over = [b["kv_transfer_params"]["remote_block_ids"][0] for d in rig.decodes for b in d.received]
    assert len(handed_over) == len(set(handed_over)), "a D was given kv_transfer_params that were already used"
    prefill_calls = served_by(rig.prefills[0]) + served_by(rig.prefills[1])
    assert prefill_calls == 6 + served_by(failing)  # every failed D cost one more prefill
    assert healthy.stale_reads == 0


async def test_client_disconnect_cancels_both_upstream_requests_in_push_mode(rig):
    await rig.start(mode="push", behaviour=Behaviour(prefill_delay=2.0))
    request = asyncio.ensure_future(rig.post({**BODY, "stream": True}))
    assert await eventually(lambda: rig.prefills[0].active == 1 and rig.decodes[0].active == 1)
    request.cancel()
    assert await eventually(lambda: rig.prefills[0].cancelled == 1 and rig.decodes[0].cancelled == 1)
    assert await eventually(lambda: rig.proxy.inflight == 0)


async def test_client_disconnect_during_prefill_cancels_it_and_decode_is_never_called(rig):
    await rig.start(mode="pull", behaviour=Behaviour(prefill_delay=2.0))
    request = asyncio.ensure_future(rig.post({**BODY, "stream": True}))
    assert await eventually(lambda: rig.prefills[0].active == 1)
    request.cancel()
    assert await eventually(lambda: rig.prefills[0].cancelled == 1)
    await asyncio.sleep(0.2)
    assert rig.decodes[0].received == []


async def test_client_disconnect_mid_stream_cancels_decode_and_prefill_holds_no_kv(rig):
    await rig.start(mode="pull", behaviour=Behaviour(token_delay=0.05))
    async with rig.session.post(rig.url + "/v1/completions", json={**BODY, "max_tokens": 200, "stream": True}) as r:
        await r.content.readany()
    assert await eventually(lambda: rig.decodes[0].cancelled == 1)
    assert rig.prefills[0].held_kv == 0
    assert rig.proxy.pool.by_role("decode")[0].load_tokens == 0


async def test_overload_is_answered_429_with_retry_after(rig):
    await rig.start(max_inflight=2, behaviour=Behaviour(token_delay=0.05))
    slow = [asyncio.ensure_future(rig.post({**BODY, "max_tokens": 20, "stream": True})) for _ in range(2)]
    assert await eventually(lambda: rig.proxy.inflight == 2)
    async with rig.session.post(rig.url + "/v1/completions", json=BODY) as response:
        assert response.status == 429
        assert response.headers["Retry-After"] == "1"
        assert (await response.json())["error"]["type"] == "rate_limit_exceeded"
    assert [status for status, _ in await asyncio.gather(*slow)] == [200, 200]
    assert 'outcome="429"} 1.0' in await rig.metrics()


async def test_decode_stream_breaking_midway_ends_with_an_sse_error_event(rig):
    await rig.start()
    rig.decodes[0].break_next_stream_after(3)
    status, body = await rig.post({**BODY, "stream": True})
    assert status == 200
    events = [e for e in body.split(b"\n\n") if e]
    assert len(events) == 4
    assert b'"error"' in events[-1] and b"[DONE]" not in body


async def test_metrics_counters_move_with_traffic(rig):
    await rig.start()
    for _ in range(3):
        await rig.post(BODY)
    text = await rig.metrics()
    assert 'ascend_pd_proxy_requests_total{endpoint="/v1/completions",outcome="200"} 3.0' in text
    assert 'ascend_pd_proxy_prefill_seconds_count 3.0' in text
    assert 'ascend_pd_proxy_routing_decisions_total{backend="' in text


async def test_no_backend_left_is_503_with_retry_after_not_an_empty_200(rig):
    await rig.start()
    await rig.decodes[0].stop()
    rig.proxy.pool.by_role("decode")[0].draining = True
    async with rig.session.post(rig.url + "/v1/completions", json=BODY) as response:
        assert response.status == 503
        assert "Retry-After" in response.headers


async def test_client_leaving_before_decode_read_the_kv_lets_decode_read_it_so_prefill_frees_it(rig):
    await rig.start(mode="pull", behaviour=Behaviour(queue_delay=0.5, token_delay=0.05))
    request = asyncio.ensure_future(rig.post({**BODY, "max_tokens": 50, "stream": True}))
    # P has answered; D is still queued and has not read P's blocks
    assert await eventually(lambda: rig.prefills[0].held_kv == 1 and rig.decodes[0].active == 1)
    request.cancel()
    assert await eventually(lambda: rig.decodes[0].cancelled == 1)  # stopped before decoding all 50 tokens
    assert rig.prefills[0].held_kv == 0  # but only after it read (and so freed) the blocks
    assert await eventually(lambda: rig.proxy.pool.by_role("decode")[0].inflight == 0)


async def test_push_prefill_failure_cancels_decode_and_starts_a_new_transfer(rig):
    await rig.start(mode="push", prefills=2, prefill_policy="round-robin")
    rig.prefills[0].fail_next(1)
    status, _ = await rig.post(BODY)
    assert status == 200
    transfers = [b["kv_transfer_params"]["transfer_id"] for b in rig.decodes[0].received]
    assert len(transfers) == 2 and len(set(transfers)) == 2
    assert rig.decodes[0].received[1]["kv_transfer_params"]["remote_port"] == rig.prefills[1].kv_port


async def test_layerwise_prefill_failure_is_retried_on_another_prefill_for_the_same_decode(rig):
    await rig.start(mode="layerwise", prefills=2, prefill_policy="round-robin")
    rig.prefills[0].fail_next(1)
    status, _ = await rig.post({**BODY, "stream": True})
    assert status == 200
    assert len(rig.decodes[0].received) == 1
    first, second = rig.prefills[0].received[0], rig.prefills[1].received[0]
    assert first["kv_transfer_params"] == second["kv_transfer_params"]  # D's coordinates, passed on unchanged


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failed_kv_handoff_is_retried_with_a_fresh_prefill_on_another_prefill(rig, stream):
    """D cannot reach one P's KV (a firewalled link) and fails such requests as vLLM does under
    kv_load_failure_policy "fail": a 500, or a stream whose first event is the error. The proxy prefills again on
    the other P, never hands D the same kv_transfer_params twice, and blames no backend for it."""
    await rig.start(prefills=2, decodes=1, prefill_policy="round-robin")
    cut, reachable = rig.prefills
    decode = rig.decodes[0]
    decode.cut_from.add(cut.port)
    for _ in range(6):
        status, body = await rig.post({**BODY, "stream": stream})
        assert status == 200 and b'"error"' not in body
    handed_over = [b["kv_transfer_params"]["remote_block_ids"][0] for b in decode.received]
    assert len(handed_over) == len(set(handed_over))
    assert served_by(cut) >= 1 and served_by(decode) == 6 + served_by(cut)  # each cut handoff: one more D call
    metrics = await rig.metrics()
    handoff_failures = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                           if line.startswith("ascend_pd_proxy_handoff_failures_total{"))
    assert handoff_failures == served_by(cut)
    assert "ascend_pd_proxy_backend_failures_total{" not in metrics  # no backend was blamed for it
