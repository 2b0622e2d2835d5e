"""Layerwise flow (vllm-ascend MooncakeLayerwiseConnector): D first with the metaserver URL, which carries a token of
this request's own (metaserver.py); when D posts its block coordinates there, P is dispatched with them and pushes the
KV layer by layer."""

from __future__ import annotations

import asyncio

from ascend_pd.deploy import handoff
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.concurrent import first_answer_of_decode
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext, StartOver
from ascend_pd.proxy.flows.prefill import prefill_on_any
from ascend_pd.proxy.metaserver import url_with_token
from ascend_pd.proxy.openai_body import decode_body
from ascend_pd.proxy.upstream import Opened, open_answer


async def layerwise(ctx: RequestContext, env: FlowEnv) -> Opened:
    decode = env.pick("decode", ctx)
    lease = decode.lease(ctx.route.tokens)
    token, coordinates = env.metaserver.expect(ctx.request_id)
    metaserver = url_with_token(env.settings.metaserver_url, token, tls=bool(env.settings.ssl_certfile))
    to_decode = handoff.encode(handoff.LayerwiseToDecode(metaserver=metaserver))
    decoding = env.start(open_answer(env.client, decode, ctx.path, decode_body(ctx.body, to_decode),
                                                 ctx.headers, ctx.streaming))
    try:
        await asyncio.wait({coordinates, decoding}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        decoding.cancel()
        lease.release()
        raise
    finally:
        env.metaserver.forget(ctx.request_id)  # cancels `coordinates` if D never posted them
    if coordinates.cancelled():  # D ended before asking for KV: an error, or an answer that needed no P
        return await _decode_alone(ctx, env, decoding, decode, lease)
    prefilling = env.start(prefill_on_any(ctx, env, coordinates.result()))
    return await first_answer_of_decode(ctx, env, None, prefilling, decoding, decode, lease)


async def _decode_alone(ctx, env, decoding, decode, lease) -> Opened:
    try:
        response, first = await decoding
    except UpstreamFailure as failure:
        lease.release()
        env.failed(decode, ctx, failure)
        raise StartOver(failure) if failure.is_backend_fault else failure
    return Opened(response, first, ctx.streaming, [lease])
