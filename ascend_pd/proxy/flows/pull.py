"""Pull flow: P prefills and holds the KV; D gets P's kv_transfer_params verbatim and reads the blocks."""

from __future__ import annotations

import asyncio

from ascend_pd.proxy.backends import Lease
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext, StartOver
from ascend_pd.proxy.flows.prefill import prefill_on_any
from ascend_pd.proxy.openai_body import decode_body
from ascend_pd.proxy.upstream import Opened, open_answer


async def pull(ctx: RequestContext, env: FlowEnv) -> Opened:
    answer = await prefill_on_any(ctx, env, {"do_remote_decode": True}, expect_kv_params=True)
    decode = env.pick("decode", ctx)
    lease = decode.lease(ctx.route.tokens)
    body = decode_body(ctx.body, answer["kv_transfer_params"])
    opening = asyncio.ensure_future(open_answer(env.session, decode, ctx.path, body, ctx.headers, ctx.streaming))
    try:
        response, first = await asyncio.shield(opening)
    except asyncio.CancelledError:
        # The client left after P prefilled. Aborting D now would strand P's blocks until P's own timeout, so D
        # runs on until it has read them (its first byte), then the connection closes.
        env.spawn(_finish_handoff(opening, lease, env.settings.handoff_grace))
        raise
    except UpstreamFailure as failure:
        lease.release()
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
