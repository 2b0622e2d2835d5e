"""What a request flow works with: the request being served, and the proxy's shared pieces."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Coroutine

from ascend_pd.proxy.backends import Backend, BackendPool
from ascend_pd.proxy.endpoints import Role
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.metaserver import Metaserver
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.policies import Policy, RouteRequest
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.wire.client import HttpClient

log = logging.getLogger("ascend_pd.proxy")


@dataclass
class RequestContext:
    request_id: str
    path: str  # /v1/completions or /v1/chat/completions
    body: dict[str, Any]
    route: RouteRequest
    headers: dict[str, str]  # sent to every backend: X-Request-Id, and the client's Authorization if any
    streaming: bool
    usage_added: bool = False  # the proxy asked for the stream's usage event (the client did not): strip it
    tried: dict[str, set[str]] = field(default_factory=dict)  # role -> URLs that failed this request
    # role -> URLs picked only when no other backend is left: the pair of a KV handoff that failed this request
    avoid: dict[str, set[str]] = field(default_factory=dict)


class NoCandidate(Exception):
    """Every backend of a role is down, draining, or already failed this request."""

    def __init__(self, role: Role):
        super().__init__(role)
        self.role = role


class StartOver(Exception):
    """This attempt failed in a way a fresh prefill on new backends may fix; its KV handoff is abandoned."""

    def __init__(self, failure: UpstreamFailure):
        super().__init__(str(failure))
        self.failure = failure


@dataclass
class FlowEnv:
    client: HttpClient  # calls to backends
    pool: BackendPool
    policies: dict[str, Policy]
    metrics: ProxyMetrics
    settings: ProxySettings
    metaserver: Metaserver
    loop: asyncio.AbstractEventLoop  # kept: asyncio.get_running_loop() costs a getpid() system call on every use
    background: set[asyncio.Task] = field(default_factory=set)

    def start(self, work: Coroutine) -> asyncio.Task:
        """Run `work` concurrently with the caller (asyncio.ensure_future without looking the loop up)."""
        return self.loop.create_task(work)

    def require(self, role: Role, ctx: RequestContext) -> list[Backend]:
        """The backends of `role` that could take this request now; NoCandidate when there are none."""
        candidates = self.pool.candidates(role, ctx.tried.get(role, ()))
        if not candidates:
            raise NoCandidate(role)
        return candidates

    def pick(self, role: Role, ctx: RequestContext) -> Backend:
        candidates = self.require(role, ctx)
        avoid = ctx.avoid.get(role)
        if avoid:
            candidates = [c for c in candidates if c.url not in avoid] or candidates
        backend = self.policies[role].choose(candidates, ctx.route)
        self.metrics.routed_to(role, backend.endpoint.name).inc()
        return backend

    def failed(self, backend: Backend, ctx: RequestContext, failure: UpstreamFailure) -> None:
        """Count a failed call and keep this request away from that backend from now on."""
        ctx.tried.setdefault(backend.role, set()).add(backend.url)
        if failure.is_backend_fault:
            self.metrics.backend_failures.labels(backend.role, backend.endpoint.name).inc()
            log.warning("request %s: %s backend %s failed: %s", ctx.request_id, backend.role, backend.url, failure)

    def handoff_failed(self, prefill: Backend, decode: Backend, ctx: RequestContext,
                       failure: UpstreamFailure) -> None:
        """D failed a request after a KV handoff (a KV load failed under kv_load_failure_policy "fail"): the fault
        may be P's, D's or the link's, so it counts against no breaker, and the next attempt prefers another P
        and another D where they are left, with fresh kv_transfer_params."""
        ctx.avoid.setdefault("prefill", set()).add(prefill.url)
        ctx.avoid.setdefault("decode", set()).add(decode.url)
        self.metrics.handoff_failures.labels(prefill.endpoint.name, decode.endpoint.name).inc()
        log.warning("request %s: decode %s failed after the KV handoff from prefill %s: %s", ctx.request_id,
                    decode.url, prefill.url, failure)

    def spawn(self, work: Coroutine | asyncio.Future) -> asyncio.Future:
        """Run work that outlives the client request (a handoff finishing, a P call completing) to its end."""
        task = self.loop.create_task(work) if asyncio.iscoroutine(work) else work
        self.background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Future) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("background work ended with %s", task.exception())
