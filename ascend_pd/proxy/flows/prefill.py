"""The P call every PD flow makes: one output token, no stream; retried on another P when a P fails."""

from __future__ import annotations

import time
from typing import Any

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, NoCandidate, RequestContext
from ascend_pd.proxy.openai_body import prefill_body
from ascend_pd.proxy.upstream import post_json


async def call_prefill(ctx: RequestContext, env: FlowEnv, backend: Backend,
                       kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    """P's answer: any 200 with a JSON object, with or without kv_transfer_params (what to do without them is
    the flow's choice, not a fault of P)."""
    lease = backend.lease(ctx.route.tokens)
    started = time.perf_counter()
    try:
        answer = await post_json(env.client, backend, ctx.path, prefill_body(ctx.body, kv_transfer_params),
                                 ctx.headers)
    except UpstreamFailure as failure:
        env.failed(backend, ctx, failure)
        raise
    finally:
        lease.release()
    env.metrics.prefill_seconds.observe(time.perf_counter() - started)
    return answer


async def prefill_on_any(ctx: RequestContext, env: FlowEnv,
                         kv_transfer_params: dict[str, Any]) -> tuple[Backend, dict[str, Any]]:
    """The P that answered, and its answer. Tries up to `prefill_attempts` different P; a refused request (4xx)
    is not retried."""
    last: UpstreamFailure | None = None
    for _ in range(env.settings.prefill_attempts):
        try:
            backend = env.pick("prefill", ctx)
        except NoCandidate:
            if last is None:
                raise
            break
        if last is not None:
            env.metrics.retries.labels("prefill").inc()
        try:
            return backend, await call_prefill(ctx, env, backend, kv_transfer_params)
        except UpstreamFailure as failure:
            if not failure.is_backend_fault:
                raise
            last = failure
    raise last
