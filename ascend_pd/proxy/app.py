"""The proxy's aiohttp application: OpenAI endpoints, health, metrics, the metaserver, and admission control."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from pathlib import Path
from typing import Iterable

from functools import partial

import aiohttp
import msgspec

from ascend_pd.proxy.admin import MAX_ADMIN_BODY_BYTES, AdminRoutes, carries_admin_token, workload_document
from ascend_pd.proxy.api_keys import ApiKeys
from ascend_pd.proxy.backend_table import BackendTable, table_of
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.engine_load import poll_engine_load_forever
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.flows import FlowEnv, RequestContext, serve
from ascend_pd.proxy.health import check_forever, make_control_session
from ascend_pd.proxy.ids import new_request_id
from ascend_pd.proxy.metaserver import MAX_POST_BYTES, ForgedPost, Metaserver, posted_token
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.openai_body import BadBody, client_body, is_streaming, prompt_text
from ascend_pd.proxy.policies import RouteRequest, make_policy
from ascend_pd.proxy.relay import relay
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.sibling_routes import SiblingRoutes
from ascend_pd.proxy.siblings import SIBLING_HEADER, SharedLoad, Siblings
from ascend_pd.proxy.table_keeper import TableKeeper
from ascend_pd.proxy.tls import server_context
from ascend_pd.proxy.tokens import EstimatedTokens, TokenCounter
from ascend_pd.proxy.upstream import make_client
from ascend_pd.proxy.wire.server import Handler, HttpServer, Request, Response, Stream
from ascend_pd.proxy.workload_window import EventCounter, RequestSample, WorkloadWindow, completion_tokens

INTERNAL_HEADERS = (SIBLING_HEADER.lower(),)  # only a sibling worker, on its private port, may send these
# what a scrape reads: with an admin listener, served there too, so the token never has to cross the public port
OPERATOR_PATHS = frozenset({"/metrics", "/health"})

log = logging.getLogger("ascend_pd.proxy")


class ProxyState:
    """The state one proxy process shares between requests; the clients it calls backends with are its server's."""

    def __init__(self, endpoints: Iterable[Endpoint], settings: ProxySettings, tokens: TokenCounter | None = None,
                 shared_load: SharedLoad | None = None, revision: str = "manual"):
        """`endpoints`: the backends from the proxy's flags; the backend table file, when it has one, wins."""
        self.settings = settings
        self.tokens = tokens or EstimatedTokens()
        self.pool = BackendPool(lambda: CircuitBreaker(settings.breaker_failures, settings.breaker_open_seconds),
                                shared_load)
        self.keeper = TableKeeper(self.pool, table_of(list(endpoints), 0, revision),
                                  Path(settings.backend_table) if settings.backend_table else None)
        self.inflight = 0
        self.metrics = ProxyMetrics(self.pool, inflight=lambda: self.inflight)
        self.window = WorkloadWindow(settings.workload_window)
        self.metaserver = Metaserver()
        self.unreadable_logged: set[type] = set()  # kinds of failure to read a client's request already logged
        self.api_keys = ApiKeys(settings.api_keys)
        self.tls = server_context(settings.ssl_certfile, settings.ssl_keyfile)  # bad files fail here, before a fork
        self.policies = {"prefill": make_policy(settings.prefill_policy, "prefill policy"),
                         "decode": make_policy(settings.decode_policy, "decode policy"),
                         "colocated": make_policy(settings.decode_policy, "decode policy")}

    def mode_now(self) -> str:
        """The configured flow, or colocated instances when no P/D pair can be formed right now."""
        mode = self.settings.mode
        if mode == "colocated" or not self.pool.has_candidate("colocated"):
            return mode
        return mode if self.pool.has_candidate("prefill") and self.pool.has_candidate("decode") else "colocated"

    def servable(self) -> bool:
        roles = ("colocated",) if self.mode_now() == "colocated" else ("prefill", "decode")
        return all(self.pool.has_candidate(role) for role in roles)


class ProxyServer:
    """The proxy serving on a socket: its HTTP server, the clients it calls backends with, and its background tasks
    (health checks). Made inside the event loop it serves on, which its clients belong to; `cleanup()` stops it."""

    def __init__(self, proxy: ProxyState, siblings: Siblings | None = None):
        self.proxy = proxy
        self.siblings = siblings
        settings = proxy.settings
        # aiohttp for the control plane (health checks, /v1/models): a few calls a second, not worth a second client
        self.control = make_control_session(settings.timeouts)
        self.env = FlowEnv(make_client(settings.timeouts), proxy.pool, proxy.policies, proxy.metrics, settings,
                           proxy.metaserver, asyncio.get_running_loop())
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/v1/completions"): partial(_completions, proxy, self.env),
            ("POST", "/v1/chat/completions"): partial(_completions, proxy, self.env),
            ("GET", "/v1/models"): partial(_models, proxy, self.control),
            ("GET", "/health"): partial(_health, proxy),
            ("GET", "/metrics"): partial(_metrics, proxy),
            ("POST", "/v1/metaserver"): partial(_metaserver, proxy),
        }
        admin = AdminRoutes(proxy.keeper, settings.admin_token, proxy.window).routes() if settings.admin_token else {}
        self.routes.update(admin)
        # with a listener of their own, the admin paths do not exist on the public port
        self._admin_paths = {path for _, path in admin} if settings.admin_port is not None else set()
        self._admin_listener_paths = self._admin_paths | OPERATOR_PATHS if self._admin_paths else set()
        if siblings is not None:
            self.routes = SiblingRoutes(self.routes, siblings, self.control, settings.timeouts.health,
                                        partial(workload_document, proxy.pool, proxy.window), proxy.keeper).routes()
        self._paths = {path for _, path in self.routes}
        # bodies no caller of these paths sends are refused from their Content-Length, before they are read
        body_limits = {"/v1/metaserver": MAX_POST_BYTES, **{path: MAX_ADMIN_BODY_BYTES for _, path in admin}}
        self.http = HttpServer(self._public_dispatch, settings.limits, proxy.tls, body_limits)
        self.private = HttpServer(self._dispatch, settings.limits, body_limits=body_limits) \
            if siblings is not None else None
        self.admin = HttpServer(self._admin_dispatch, dataclasses.replace(
            settings.limits, max_body_bytes=MAX_ADMIN_BODY_BYTES)) if self._admin_paths else None
        self.admin_url: str | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self, host: str, port: int, reuse_port: bool = False) -> str:
        """Start the background tasks, then listen; returns the base URL."""
        proxy = self.proxy
        settings = proxy.settings
        if settings.health_interval > 0:
            self._tasks.append(asyncio.create_task(check_forever(self.control, proxy.pool, settings.health_interval,
                                                                 settings.timeouts.health)))
        if settings.engine_load_interval > 0 and (self.siblings is None or self.siblings.worker == 0):
            # with workers, the first polls for all (the readings are shared): the engines see one proxy's scrapes
            self._tasks.append(asyncio.create_task(poll_engine_load_forever(
                self.control, proxy.pool, settings.engine_load_interval, settings.timeouts.health)))
        if proxy.keeper.path is not None:
            self._tasks.append(asyncio.create_task(proxy.keeper.watch(settings.table_interval)))
        if self.private is not None:
            await self.private.start_on(self.siblings.private_sockets[self.siblings.worker])
            await self._catch_up()
        if self.admin is not None:  # every worker listens, as on the public port: any of them relays a change
            admin_host, admin_port = await self.admin.start(settings.admin_host, settings.admin_port, reuse_port)
            self.admin_url = f"http://{admin_host}:{admin_port}"
        bound_host, bound_port = await self.http.start(host, port, reuse_port)
        return f"{'https' if self.proxy.tls else 'http'}://{bound_host}:{bound_port}"

    async def _catch_up(self) -> None:
        """A worker started again takes the newest table its siblings serve: changes made since the proxy started
        may not be in any file (no --backend-table)."""
        token = self.proxy.settings.admin_token
        if not token:
            return
        answers = await self.siblings.tell_all(self.control, "GET", "/admin/table", b"",
                                               {"Authorization": f"Bearer {token}"},
                                               self.proxy.settings.timeouts.health)
        for status, body in answers:
            if status == 200:
                answer = msgspec.json.decode(body)
                answer.pop("worker_generations", None)
                self.proxy.keeper.offer(msgspec.convert(answer, BackendTable), persist=False)

    async def cleanup(self) -> None:
        await self.http.close()
        if self.private is not None:
            await self.private.close()
        if self.admin is not None:
            await self.admin.close()
        for task in [*self._tasks, *self.env.background]:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await self.env.client.close()
        await self.control.close()

    async def _public_dispatch(self, request: Request) -> Response | Stream:
        """A request from a client: internal headers it may have forged are dropped, and its API key checked."""
        for name in INTERNAL_HEADERS:
            request.headers.pop(name, None)
        try:
            self.proxy.api_keys.check(request)
        except ClientError as exc:
            return exc.response()
        if request.path in self._admin_paths:
            return ClientError(404, f"{request.method} {request.path}: not found", "invalid_request_error").response()
        return await self._dispatch(request)

    async def _admin_dispatch(self, request: Request) -> Response | Stream:
        """A request on the admin listener: the admin endpoints, /metrics and /health, nothing else."""
        for name in INTERNAL_HEADERS:
            request.headers.pop(name, None)
        if request.path not in self._admin_listener_paths:
            return ClientError(404, f"{request.method} {request.path}: not found", "invalid_request_error").response()
        return await self._dispatch(request)

    async def _dispatch(self, request: Request) -> Response | Stream:
        handler = self.routes.get((request.method, request.path))
        try:
            if handler is None:
                status, what = (405, "method not allowed") if request.path in self._paths else (404, "not found")
                raise ClientError(status, f"{request.method} {request.path}: {what}", "invalid_request_error")
            return await handler(request)
        except ClientError as exc:
            return exc.response()


async def _completions(proxy: ProxyState, env: FlowEnv, request: Request) -> Response | Stream:
    endpoint = request.path
    # refused requests are not demand: the workload window (what the autoscaler sizes for) never sees them
    if proxy.inflight >= proxy.settings.max_inflight:
        proxy.metrics.request_outcome(endpoint, "429").inc()
        raise ClientError(429, f"the proxy is at its limit of {proxy.settings.max_inflight} requests in flight",
                          "rate_limit_exceeded", retry_after=proxy.settings.retry_after_seconds)
    try:
        ctx = _context(request, proxy)
    except Exception as exc:  # whatever a client's bytes make fail here is a 400: never a 500 it can repeat
        proxy.metrics.request_outcome(endpoint, "400").inc()
        raise ClientError(400, _unreadable(proxy, exc), "invalid_request_error") from None
    arrived, arrived_wall = time.perf_counter(), proxy.window.arrive()
    proxy.inflight += 1
    outcome = "cancelled"  # stays so if the client leaves before an answer
    prompt_tokens, output_tokens, ttft, tpot = ctx.route.tokens, -1, -1.0, -1.0
    try:
        opened = await serve(ctx, env, proxy.mode_now())
        first_at = time.perf_counter()
        proxy.metrics.first_token_seconds.observe(first_at - arrived)
        events = EventCounter(strip_usage=ctx.usage_added)
        streaming = opened.streaming
        whole = opened.first
        response = await relay(request, opened, proxy.metrics, events)
        outcome = "200"
        if streaming:
            ttft = first_at - arrived
            output_tokens = events.tokens()
            if output_tokens >= 2:
                tpot = (events.last_at - first_at) / (output_tokens - 1)
                proxy.metrics.time_per_output_token.observe(tpot)
        else:
            output_tokens = completion_tokens(whole)
        if output_tokens >= 0:
            proxy.metrics.output_tokens.observe(output_tokens)
        return response
    except ClientError as exc:
        outcome = str(exc.status)
        raise
    finally:
        proxy.inflight -= 1
        proxy.metrics.request_outcome(endpoint, outcome).inc()
        if outcome != "400":  # a request an engine refused to read is no part of the workload's lengths
            proxy.metrics.prompt_tokens.observe(prompt_tokens)
            proxy.window.add(RequestSample(arrived_wall, prompt_tokens, output_tokens, ttft, tpot, outcome == "200"))


def _unreadable(proxy: ProxyState, exc: Exception) -> str:
    """The client's message for a request the proxy could not read. A BadBody says what is wrong; anything else is
    logged, the first of its kind with its traceback, so a client repeating the request cannot flood the log."""
    if isinstance(exc, BadBody):
        return str(exc)
    if type(exc) not in proxy.unreadable_logged:
        proxy.unreadable_logged.add(type(exc))
        log.warning("reading a client's request failed; answered 400, and no more of this kind is logged",
                    exc_info=exc)
    return f"the proxy cannot read this request ({type(exc).__name__})"


def _context(request: Request, proxy: ProxyState) -> RequestContext:
    body = client_body(request.body)
    request_id = new_request_id()
    headers = {"X-Request-Id": request_id, "Content-Type": "application/json"}
    if "authorization" in request.headers:
        headers["Authorization"] = request.headers["authorization"]
    prompt = prompt_text(body)
    streaming = is_streaming(body)
    options = body.get("stream_options")
    usage_added = streaming and (options is None or isinstance(options, dict)) and not (options or {}).get(
        "include_usage")
    if usage_added:  # the exact output token count, for the workload window; taken out before the client sees it
        body = {**body, "stream_options": {**(options or {}), "include_usage": True}}
    return RequestContext(request_id=request_id, path=request.path, body=body,
                          route=RouteRequest(prompt, proxy.tokens.count(prompt)), headers=headers,
                          streaming=streaming, usage_added=usage_added)


async def _models(proxy: ProxyState, control: aiohttp.ClientSession, request: Request) -> Response:
    for role in ("decode", "colocated", "prefill"):
        for backend in proxy.pool.candidates(role):
            try:
                async with control.get(backend.url + "/v1/models") as answer:
                    if answer.status == 200:
                        return Response(await answer.read())
            except (aiohttp.ClientError, asyncio.TimeoutError):  # this one cannot answer: ask the next
                continue
    raise ClientError(503, "no backend answered /v1/models", "service_unavailable",
                      retry_after=proxy.settings.retry_after_seconds)


def _may_see_detail(proxy: ProxyState, request: Request) -> bool:
    """Backend URLs, names and load are for the operator: the admin token's holders, or anyone with public_detail."""
    if proxy.settings.public_detail:
        return True
    return carries_admin_token(request, proxy.settings.admin_token)


async def _health(proxy: ProxyState, request: Request) -> Response:
    """The status code is for probes, open to all; the backends behind it only for those who may see detail."""
    servable = proxy.servable()
    body = {"status": "ok" if servable else "unavailable", "mode": proxy.mode_now()}
    if _may_see_detail(proxy, request):
        body.update(inflight=proxy.inflight, backends=[b.describe() for b in proxy.pool.all()])
    return Response(msgspec.json.encode(body), 200 if servable else 503)


async def _metrics(proxy: ProxyState, request: Request) -> Response:
    if not _may_see_detail(proxy, request):
        raise ClientError(401, "/metrics names the backends: send 'Authorization: Bearer <admin token>', or start "
                               "the proxy with --public-detail", "unauthorized")
    return Response(proxy.metrics.exposition(), content_type="text/plain; version=0.0.4; charset=utf-8")


async def _metaserver(proxy: ProxyState, request: Request) -> Response:
    """D's kv_transfer_params, taken only from the URL the proxy handed D: its token comes back as Basic auth."""
    if len(request.body) > MAX_POST_BYTES:
        raise ClientError(413, f"a metaserver post is at most {MAX_POST_BYTES} bytes", "invalid_request_error")
    token = posted_token(request.headers.get("authorization"))
    if token is None:
        raise ClientError(403, "post to the metaserver URL the proxy handed D: it carries the request's token",
                          "forbidden")
    try:
        payload = msgspec.json.decode(request.body)
    except msgspec.DecodeError:
        raise ClientError(400, "metaserver body must be the JSON kv_transfer_params of D", "invalid_request_error")
    try:
        delivered = isinstance(payload, dict) and proxy.metaserver.deliver(payload, token)
    except ForgedPost:
        raise ClientError(403, "this post does not carry the token of the request it names", "forbidden") from None
    if not delivered:
        raise ClientError(404, "no request is waiting for these kv_transfer_params", "not_found")
    return Response(b'{"status":"ok"}')


async def start_server(proxy: ProxyState, host: str, port: int, reuse_port: bool = False,
                       siblings: Siblings | None = None) -> tuple[ProxyServer, str]:
    """Serve the proxy on host:port (0 picks a free port); returns the server to clean up and its base URL.
    A client that disconnects cancels its handler, which is what closes the upstream requests. `siblings` makes
    this one worker of several on the port."""
    server = ProxyServer(proxy, siblings)
    url = await server.start(host, port, reuse_port)
    return server, url
