"""Pull flow: P prefills and holds the KV; D gets P's kv_transfer_params verbatim and reads the blocks."""

from __future__ import annotations

import asyncio

from ascend_pd.deploy.handoff import ToPrefill, encode
from ascend_pd.proxy.backends import Backend, Lease
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext, StartOver, log
from ascend_pd.proxy.flows.prefill import prefill_on_any
from ascend_pd.proxy.openai_body import client_answer, decode_body, is_whole_answer
from ascend_pd.proxy.upstream import Opened, open_answer


async def pull(ctx: RequestContext, env: FlowEnv) -> Opened:
    # No D to hand over to: refuse before P prefills, or P would hold the KV for nobody until its abort timeout
    env.require("decode", ctx)
    prefill, answer = await prefill_on_any(ctx, env, encode(ToPrefill()))
    params = answer.get("kv_transfer_params")
    handoff = isinstance(params, dict)
    if not handoff:
        if is_whole_answer(ctx.body, answer):
            _without_kv(ctx, env, prefill, answer, "answered", "its answer is the whole answer, D is not needed")
            return Opened(None, client_answer(ctx.body, answer), ctx.streaming, [])
        _without_kv(ctx, env, prefill, answer, "recomputed", "D computes the prompt itself")
    body = decode_body(ctx.body, params) if handoff else ctx.body
    decode = env.pick("decode", ctx)
    lease = decode.lease(ctx.route.tokens)
    opening = env.start(open_answer(env.client, decode, ctx.path, body, ctx.headers, ctx.streaming,
                                                     handoff=handoff))
    try:
        response, first = await asyncio.shield(opening)
    except asyncio.CancelledError:
        if not handoff:  # no P blocks wait for D: it stops at once
            opening.cancel()
            lease.release()
            raise
        # The client left after P prefilled. Aborting D now would strand P's blocks until P's own timeout, so D
        # runs on until it has read them (its first byte), then the connection closes.
        env.spawn(_finish_handoff(opening, lease, env.settings.handoff_grace))
        raise
    except UpstreamFailure as failure:
        lease.release()
        if handoff and failure.status is not None and failure.status >= 500:
            env.handoff_failed(prefill, decode, ctx, failure)
        else:
            env.failed(decode, ctx, failure)
        # never replay these kv_transfer_params: P may have freed or reused the blocks, so start over
        raise StartOver(failure) if failure.is_backend_fault else failure
    return Opened(response, first, ctx.streaming, [lease])


async def _finish_handoff(opening: asyncio.Future, lease: Lease, grace: float) -> None:
    try:
        response, _ = await asyncio.wait_for(opening, grace)
        response.close()
    except (UpstreamFailure, asyncio.TimeoutError):
        pass  # D failed or took too long: nothing more the proxy can do for P's blocks
    finally:
        lease.release()


def _without_kv(ctx: RequestContext, env: FlowEnv, prefill: Backend, answer: dict, outcome: str, then: str) -> None:
    """A 200 from P without kv_transfer_params is no fault of P: no retry, no breaker. vLLM's connectors return
    them only from a prefill that ended length-capped, which the `min_tokens: 1` sent to P ensures on a kv_producer
    that honours min_tokens. Logged, since such a P is not set up as this proxy expects."""
    env.metrics.prefill_without_kv.labels(outcome).inc()
    finish = [choice.get("finish_reason") for choice in answer.get("choices") or () if isinstance(choice, dict)]
    log.warning("request %s: prefill %s answered without kv_transfer_params (finish_reason %s): %s; is it a "
                "kv_producer that honours min_tokens?", ctx.request_id, prefill.url, ", ".join(map(str, finish)), then)
