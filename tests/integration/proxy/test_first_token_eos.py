"""Prompts whose first output token is EOS, over real sockets. vLLM's pull connectors return kv_transfer_params only
from a prefill that ended length-capped, so P must be asked for min_tokens 1; and a P answer without them (an engine
that does not honour the rule) is answered correctly, never taken for a failed backend."""

import msgspec
import pytest

from tests.fakes.vllm_api import Behaviour

pytestmark = pytest.mark.asyncio

COMPLETION = {"model": "fake-model", "prompt": "Goodbye.", "max_tokens": 12}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Nothing more to say."}], "max_tokens": 7}
EOS_FIRST = Behaviour(eos_first=frozenset({"Goodbye.", "Nothing more to say."}))
IGNORES_MIN_TOKENS = Behaviour(eos_first=EOS_FIRST.eos_first, honours_min_tokens=False)
BODIES = [(COMPLETION, "/v1/completions"), (CHAT, "/v1/chat/completions")]


def sse_events(payload: bytes) -> list[dict]:
    """The JSON events of an SSE body, which must end with [DONE]."""
    events = [event.removeprefix(b"data: ") for event in payload.split(b"\n\n") if event]
    assert events[-1] == b"[DONE]"
    return [msgspec.json.decode(event) for event in events[:-1]]


def answered_text(payload: bytes, streaming: bool) -> tuple[str, str]:
    """The text and the finish reason of a one-choice answer, streamed or not."""
    choices = [choice for event in sse_events(payload) for choice in event["choices"]] if streaming \
        else msgspec.json.decode(payload)["choices"]
    text = "".join(c.get("text") or (c.get("delta") or c.get("message") or {}).get("content") or "" for c in choices)
    finishes = [c["finish_reason"] for c in choices if c.get("finish_reason")]
    assert len(finishes) == 1
    return text, finishes[0]


def all_breakers_closed(rig) -> bool:
    return all(b.breaker.state == "closed" and b.breaker.consecutive_failures == 0 for b in rig.proxy.pool.all())


async def no_retries_or_failures(rig) -> bool:
    metrics = await rig.metrics()
    return "ascend_pd_proxy_retries_total{" not in metrics and "ascend_pd_proxy_backend_failures_total{" not in metrics


@pytest.mark.parametrize("mode", ["pull", "push", "layerwise", "colocated"])
@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("request_body,path", BODIES)
async def test_a_prompt_whose_first_token_is_eos_is_answered_like_a_direct_request(rig, mode, streaming,
                                                                                    request_body, path):
    colocated = mode == "colocated"
    await rig.start(prefills=0 if colocated else 1, decodes=0 if colocated else 1, colocated=int(colocated),
                    mode=mode, behaviour=EOS_FIRST)
    body = {**request_body, "stream": streaming}
    status, proxied = await rig.post(body, path)
    assert status == 200
    assert answered_text(proxied, streaming) == ("", "stop")
    generator = rig.colocated[0] if colocated else rig.decodes[0]
    assert len(generator.received) == 1 and generator.recomputes == 0
    if not colocated:  # P ended length-capped, so the handoff happened: D answered from P's KV
        to_prefill = rig.prefills[0].received
        assert len(to_prefill) == 1 and to_prefill[0]["min_tokens"] == 1 and to_prefill[0]["max_tokens"] == 1
        assert rig.prefills[0].finish_reasons == {"length": 1}
        assert rig.decodes[0].received[0]["kv_transfer_params"]["do_remote_prefill"] is True
        assert rig.prefills[0].held_kv == 0
    direct_status, direct = await rig.post(body, path, base=generator.url)
    assert direct_status == 200
    if streaming:
        assert proxied == direct
    else:
        assert msgspec.json.decode(proxied)["choices"] == msgspec.json.decode(direct)["choices"]
    assert all_breakers_closed(rig)
    assert await no_retries_or_failures(rig)


async def test_eos_first_prompts_cause_no_retry_storm_and_open_no_breaker(rig):
    await rig.start(prefills=3, mode="pull", behaviour=EOS_FIRST, breaker_failures=1, prefill_policy="round-robin")
    for streaming in (False, True, False, True, False, True):
        status, answer = await rig.post({**COMPLETION, "stream": streaming})
        assert status == 200 and answered_text(answer, streaming) == ("", "stop")
    assert [len(p.received) for p in rig.prefills] == [2, 2, 2]  # one P call per request
    assert len(rig.decodes[0].received) == 6
    assert all_breakers_closed(rig) and rig.proxy.servable()
    assert await no_retries_or_failures(rig)


async def test_the_clients_min_tokens_still_holds_eos_back_on_decode(rig):
    await rig.start(mode="pull", behaviour=EOS_FIRST)
    status, answer = await rig.post({**COMPLETION, "min_tokens": 2})
    assert status == 200
    text, finish = answered_text(answer, False)
    assert finish == "length" and text  # D was asked for min_tokens 2: no stop at EOS
    assert rig.decodes[0].received[0]["min_tokens"] == 2


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("request_body,path", BODIES)
async def test_a_prefill_that_stops_at_eos_without_kv_params_gives_the_client_its_whole_answer(rig, streaming,
                                                                                              request_body, path):
    """An engine that lets EOS end P despite min_tokens 1: P's answer is already the whole answer."""
    await rig.start(prefills=2, mode="pull", behaviour=EOS_FIRST)
    for prefill in rig.prefills:
        prefill.behaviour = IGNORES_MIN_TOKENS
    body = {**request_body, "stream": streaming, "stream_options": {"include_usage": True}} if streaming \
        else request_body
    status, answer = await rig.post(body, path)
    assert status == 200
    assert answered_text(answer, streaming) == ("", "stop")
    if streaming:
        assert sse_events(answer)[-1]["usage"]["completion_tokens"] == 1  # the EOS
    assert sum(len(p.received) for p in rig.prefills) == 1  # not retried on the other P
    assert sum(p.finish_reasons["stop"] for p in rig.prefills) == 1
    assert rig.decodes[0].received == []  # nothing left for D to do
    assert all_breakers_closed(rig)
    assert await no_retries_or_failures(rig)
    assert 'ascend_pd_proxy_prefill_without_kv_params_total{outcome="answered"} 1.0' in await rig.metrics()


async def test_a_stopped_prefill_is_not_the_answer_when_the_client_wants_more_tokens(rig):
    await rig.start(mode="pull", behaviour=EOS_FIRST)
    rig.prefills[0].behaviour = IGNORES_MIN_TOKENS
    status, answer = await rig.post({**COMPLETION, "min_tokens": 3})
    assert status == 200
    text, finish = answered_text(answer, False)
    assert finish == "length" and text  # D computed the prompt and honoured min_tokens
    assert rig.decodes[0].recomputes == 1
    assert all_breakers_closed(rig)
    assert 'ascend_pd_proxy_prefill_without_kv_params_total{outcome="recomputed"} 1.0' in await rig.metrics()
