"""GET /v1/workload: the live workload the proxy measured over its window, from requests through real sockets."""

import asyncio

import pytest

from tests.fakes.vllm_api import Behaviour
from ascend_pd.proxy.tokens import EstimatedTokens

pytestmark = pytest.mark.asyncio
AUTH = {"Authorization": "Bearer s3cret"}


async def workload(rig) -> dict:
    async with rig.session.get(rig.url + "/v1/workload", headers=AUTH) as response:
        assert response.status == 200
        return await response.json()


async def test_the_workload_endpoint_needs_the_admin_token(rig):
    await rig.start(admin_token="s3cret")
    async with rig.session.get(rig.url + "/v1/workload") as response:
        assert response.status == 401


async def test_lengths_ttft_and_tpot_are_what_the_engines_did(rig):
    token_delay, prefill_delay = 0.02, 0.15
    await rig.start(admin_token="s3cret", behaviour=Behaviour(prefill_delay=prefill_delay, token_delay=token_delay))
    prompts = [f"prompt number {i} " * (1 + i % 4) for i in range(12)]
    outputs = [4 + i % 3 * 8 for i in range(12)]
    for prompt, count in zip(prompts, outputs):  # one at a time: each request sees an idle pair
        status, _ = await rig.post({"model": "fake-model", "prompt": prompt, "max_tokens": count, "stream": True})
        assert status == 200
    seen = await workload(rig)
    assert seen["requests"] == 12 and seen["failed"] == 0 and seen["streamed"] == 12
    tokens = EstimatedTokens()
    assert seen["prompt_tokens"]["mean"] == pytest.approx(sum(tokens.count(p) for p in prompts) / 12)
    assert seen["output_tokens"]["mean"] == pytest.approx(sum(outputs) / 12)
    # TTFT is P's prefill (plus loopback hops); TPOT the fake's pause between tokens (plus scheduling)
    assert prefill_delay <= seen["ttft_seconds"]["p50"] < prefill_delay + 0.1
    assert token_delay <= seen["tpot_seconds"]["p50"] < token_delay * 1.5
    assert seen["rate_rps"] > 0 and {b["role"] for b in seen["backends"]} == {"prefill", "decode"}


async def test_non_streamed_answers_count_for_lengths_but_not_for_latency(rig):
    await rig.start(admin_token="s3cret")
    for _ in range(3):
        assert (await rig.post({"model": "fake-model", "prompt": "hello", "max_tokens": 7}))[0] == 200
    seen = await workload(rig)
    assert seen["output_tokens"]["mean"] == 7 and seen["streamed"] == 0 and seen["ttft_seconds"] is None


async def test_failed_requests_count_as_demand_and_as_failures(rig):
    await rig.start(admin_token="s3cret", pair_attempts=1, prefill_attempts=1)
    rig.prefills[0].fail_next(2)
    statuses = [(await rig.post({"model": "fake-model", "prompt": "x", "max_tokens": 2}))[0] for _ in range(4)]
    assert statuses.count(200) == 2
    seen = await workload(rig)
    assert seen["requests"] == 4 and seen["finished"] == 4 and seen["failed"] == 2


async def test_requests_older_than_the_window_leave_it(rig):
    await rig.start(admin_token="s3cret", workload_window=1.0)
    assert (await rig.post({"model": "fake-model", "prompt": "old", "max_tokens": 2}))[0] == 200
    await asyncio.sleep(1.2)
    assert (await rig.post({"model": "fake-model", "prompt": "new", "max_tokens": 2}))[0] == 200
    seen = await workload(rig)
    assert seen["requests"] == 1 and seen["rate_rps"] == pytest.approx(1.0, rel=0.05)


async def test_streams_carry_the_usage_event_only_when_the_client_asked_for_it(rig):
    await rig.start(admin_token="s3cret")
    body = {"model": "fake-model", "prompt": "count me", "max_tokens": 6, "stream": True}
    _, plain = await rig.post(body)
    _, asked = await rig.post({**body, "stream_options": {"include_usage": True}})
    assert b'"usage"' not in plain and plain.endswith(b"data: [DONE]\n\n")
    assert b'"choices":[],"usage"' in asked and asked.endswith(b"data: [DONE]\n\n")
    assert all(b.get("stream_options", {}).get("include_usage") for b in rig.decodes[0].received)
    assert all("stream_options" not in b for b in rig.prefills[0].received)  # vLLM refuses them without a stream
    assert (await workload(rig))["output_tokens"]["mean"] == 6
