"""The P call every PD flow makes: one output token, no stream; retried on another P when a P fails."""

from __future__ import annotations

import time
from typing import Any

from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.flows.context import FlowEnv, NoCandidate, RequestContext
from ascend_pd.proxy.openai_body import prefill_body
from ascend_pd.proxy.upstream import post_json


async def call_prefill(ctx: RequestContext, env: FlowEnv, backend: Backend, kv_transfer_params: dict[str, Any],
                       expect_kv_params: bool = False) -> dict[str, Any]:
    """P's answer. With `expect_kv_params`, an answer without kv_transfer_params is a failure: D would
    otherwise silently recompute the whole prompt."""
    lease = backend.lease(ctx.route.tokens)
    started = time.perf_counter()
    try:
        answer = await post_json(env.session, backend, ctx.path, prefill_body(ctx.body, kv_transfer_params),
                                 ctx.headers)
        if expect_kv_params and not isinstance(answer.get("kv_transfer_params"), dict):
            backend.breaker.record_failure()
            raise UpstreamFailure(backend.url, "answered without kv_transfer_params (is it a kv_producer?)")
    except UpstreamFailure as failure:
        env.failed(backend, ctx, failure)
        raise
    finally:
        lease.release()
    env.metrics.prefill_seconds.observe(time.perf_counter() - started)
    return answer


async def prefill_on_any(ctx: RequestContext, env: FlowEnv, kv_transfer_params: dict[str, Any],
                         expect_kv_params: bool = False) -> dict[str, Any]:
    """Try up to `prefill_attempts` different P; a refused request (4xx) is not retried."""
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
            return await call_prefill(ctx, env, backend, kv_transfer_params, expect_kv_params)
        except UpstreamFailure as failure:
            if not failure.is_backend_fault:
                raise
            last = failure
    raise last
