"""Waiting on P and D that run at the same time (push and layerwise): D's answer, or a clean abort of both."""

from __future__ import annotations

import asyncio

from ascend_pd.proxy.backends import Backend, Lease
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext, StartOver
from ascend_pd.proxy.upstream import Opened


async def first_answer_of_decode(ctx: RequestContext, env: FlowEnv, prefill: Backend | None, prefilling: asyncio.Future,
                                 decoding: asyncio.Future, decode: Backend, lease: Lease) -> Opened:
    """D's first byte. If P fails first, D is cancelled (it would wait for KV that never comes); if D fails, P is
    cancelled (its KV has nowhere to go). A P still finishing after D's first byte runs on in the background.
    `prefill` is the P tied to D before they start (push), None when P is chosen later (layerwise)."""
    try:
        done, _ = await asyncio.wait({prefilling, decoding}, return_when=asyncio.FIRST_COMPLETED)
        if prefilling in done and prefilling.exception() is not None:
            decoding.cancel()
            failure = prefilling.exception()
            if isinstance(failure, UpstreamFailure) and failure.is_backend_fault:
                raise StartOver(failure)
            raise failure
        response, first = await decoding
    except UpstreamFailure as failure:  # from D
        prefilling.cancel()
        lease.release()
        if prefill is not None and failure.status is not None and failure.status >= 500:
            env.handoff_failed(prefill, decode, ctx, failure)
        else:
            env.failed(decode, ctx, failure)
        raise StartOver(failure) if failure.is_backend_fault else failure
    except BaseException:  # P failed, or the client left: both legs stop
        prefilling.cancel()
        decoding.cancel()
        lease.release()
        raise
    if not prefilling.done():
        env.spawn(prefilling)
    return Opened(response, first, ctx.streaming, [lease])
