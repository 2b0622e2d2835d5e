"""Request flows, one short async function per mode, and the loop that starts a failed attempt over."""

from __future__ import annotations

from ascend_pd.proxy.failures import ClientError, UpstreamFailure, from_upstream, no_backend
from ascend_pd.proxy.flows.colocated import colocated
from ascend_pd.proxy.flows.context import FlowEnv, NoCandidate, RequestContext, StartOver
from ascend_pd.proxy.flows.layerwise import layerwise
from ascend_pd.proxy.flows.pull import pull
from ascend_pd.proxy.flows.push import push
from ascend_pd.proxy.upstream import Opened

FLOWS = {"pull": pull, "push": push, "layerwise": layerwise, "colocated": colocated}


async def serve(ctx: RequestContext, env: FlowEnv, mode: str) -> Opened:
    """D's (or the colocated instance's) answer once it has started, or a ClientError to send instead."""
    flow = FLOWS[mode]
    last: UpstreamFailure | None = None
    for attempt in range(env.settings.pair_attempts):
        if attempt:
            env.metrics.retries.labels("pair").inc()
        try:
            return await flow(ctx, env)
        except StartOver as exc:
            last = exc.failure
        except NoCandidate as exc:
            raise (from_upstream(last) if last else no_backend(exc.role, env.settings.retry_after_seconds)) from None
        except UpstreamFailure as failure:
            raise from_upstream(failure) from None
    raise from_upstream(last)


__all__ = ["FLOWS", "ClientError", "FlowEnv", "RequestContext", "serve"]
