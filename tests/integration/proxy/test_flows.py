"""Each flow over real sockets: the client sees exactly what D would have sent, and each leg gets the right body."""

import msgspec
import pytest

from ascend_pd.proxy.settings import BackendTimeouts
from tests.integration.proxy.conftest import eventually

pytestmark = pytest.mark.asyncio

COMPLETION = {"model": "fake-model", "prompt": "The capital of France is", "max_tokens": 12}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Say something"}], "max_tokens": 7}


@pytest.mark.parametrize("mode", ["pull", "push", "layerwise"])
@pytest.mark.parametrize("request_body,path", [(COMPLETION, "/v1/completions"), (CHAT, "/v1/chat/completions")])
async def test_streaming_output_is_identical_to_direct_decode_output(rig, mode, request_body, path):
    await rig.start(mode=mode)
    body = {**request_body, "stream": True, "stream_options": {"include_usage": True}}
    status, proxied = await rig.post(body, path)
    # the same request straight to D, which then computes the prompt itself: same tokens, same bytes
    direct_status, direct = await rig.post(body, path, base=rig.decodes[0].url)
    assert status == direct_status == 200
    assert proxied == direct
    assert proxied.endswith(b"data: [DONE]\n\n")
    assert rig.decodes[0].stale_reads == 0
    assert rig.prefills[0].held_kv == 0


@pytest.mark.parametrize("mode", ["pull", "push", "layerwise"])
async def test_non_streaming_answer_matches_direct_decode(rig, mode):
    await rig.start(mode=mode)
    status, proxied = await rig.post(COMPLETION)
    _, direct = await rig.post(COMPLETION, base=rig.decodes[0].url)
    assert status == 200
    assert msgspec.json.decode(proxied)["choices"] == msgspec.json.decode(direct)["choices"]


async def test_sse_answer_has_event_stream_content_type(rig):
    await rig.start()
    async with rig.session.post(rig.url + "/v1/completions", json={**COMPLETION, "stream": True}) as response:
        await response.read()
        assert response.headers["Content-Type"] == "text/event-stream"


async def test_pull_prefill_gets_one_token_no_stream_and_decode_gets_prefills_params_verbatim(rig):
    await rig.start(mode="pull")
    body = {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}, "min_tokens": 5,
            "max_completion_tokens": 12}
    status, _ = await rig.post(body)
    assert status == 200
    to_prefill = rig.prefills[0].received[0]
    assert to_prefill["stream"] is False
    assert to_prefill["max_tokens"] == 1 and to_prefill["max_completion_tokens"] == 1
    assert "stream_options" not in to_prefill and to_prefill["min_tokens"] == 1
    assert to_prefill["kv_transfer_params"] == {"do_remote_decode": True}
    to_decode = rig.decodes[0].received[0]
    assert to_decode["kv_transfer_params"]["remote_host"] == rig.prefills[0].host
    assert to_decode["kv_transfer_params"]["remote_port"] == rig.prefills[0].port
    assert to_decode["max_tokens"] == 12 and to_decode["min_tokens"] == 5 and to_decode["stream"] is True


async def test_push_sends_prefill_and_decode_one_shared_transfer_id_and_prefills_side_channel(rig):
    await rig.start(mode="push")
    status, _ = await rig.post(COMPLETION)
    assert status == 200
    to_prefill = rig.prefills[0].received[0]["kv_transfer_params"]
    to_decode = rig.decodes[0].received[0]["kv_transfer_params"]
    assert to_prefill["transfer_id"] == to_decode["transfer_id"]
    assert to_decode["do_remote_prefill"] is True
    assert (to_decode["remote_host"], to_decode["remote_port"]) == (rig.prefills[0].host, rig.prefills[0].kv_port)
    assert to_decode["remote_engine_id"] == rig.prefills[0].engine_id


async def test_layerwise_dispatches_prefill_with_the_coordinates_decode_posted(rig):
    await rig.start(mode="layerwise")
    status, _ = await rig.post(COMPLETION)
    assert status == 200
    to_decode = rig.decodes[0].received[0]["kv_transfer_params"]
    assert to_decode["metaserver"].endswith("/v1/metaserver")
    to_prefill = rig.prefills[0].received[0]["kv_transfer_params"]
    assert to_prefill["remote_port"] == rig.decodes[0].kv_port
    assert len(rig.proxy.metaserver) == 0


async def test_colocated_instance_is_served_directly(rig):
    await rig.start(prefills=0, decodes=0, colocated=1)
    status, proxied = await rig.post({**COMPLETION, "stream": True})
    _, direct = await rig.post({**COMPLETION, "stream": True}, base=rig.colocated[0].url)
    assert status == 200 and proxied == direct
    assert "kv_transfer_params" not in rig.colocated[0].received[0]


async def test_models_and_health_report_real_backends(rig):
    await rig.start()
    async with rig.session.get(rig.url + "/v1/models") as response:
        assert (await response.json())["data"][0]["id"] == "fake-model"
    async with rig.session.get(rig.url + "/health") as response:
        health = await response.json()
    assert response.status == 200
    assert {b["url"] for b in health["backends"]} == {rig.prefills[0].url, rig.decodes[0].url}


async def test_health_is_503_when_no_decode_can_be_reached(rig):
    await rig.start(health_interval=0.05, breaker_failures=1, timeouts=BackendTimeouts(health=0.2))
    await rig.decodes[0].stop()
    assert await eventually(lambda: not rig.proxy.servable())
    async with rig.session.get(rig.url + "/health") as response:
        assert response.status == 503
