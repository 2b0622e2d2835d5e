"""Colocated flow: one instance does both phases, so the request goes to it unchanged."""

from __future__ import annotations

import asyncio

from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext, StartOver
from ascend_pd.proxy.upstream import Opened, open_answer


async def colocated(ctx: RequestContext, env: FlowEnv) -> Opened:
    backend = env.pick("colocated", ctx)
    lease = backend.lease(ctx.route.tokens)
    try:
        response, first = await open_answer(env.client, backend, ctx.path, ctx.body, ctx.headers, ctx.streaming)
    except UpstreamFailure as failure:
        lease.release()
        env.failed(backend, ctx, failure)
        raise StartOver(failure) if failure.is_backend_fault else failure
    except asyncio.CancelledError:
        lease.release()
        raise
    return Opened(response, first, ctx.streaming, [lease])
