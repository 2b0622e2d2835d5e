"""The proxy's aiohttp application: OpenAI endpoints, health, metrics, the metaserver, and admission control."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Iterable

import aiohttp
import msgspec
from aiohttp import web

from ascend_pd.proxy.admin import add_admin_routes
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.flows import FlowEnv, RequestContext, serve
from ascend_pd.proxy.health import check_forever
from ascend_pd.proxy.ids import new_request_id
from ascend_pd.proxy.metaserver import Metaserver
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.openai_body import is_streaming, prompt_text
from ascend_pd.proxy.policies import RouteRequest, make_policy
from ascend_pd.proxy.relay import relay
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.proxy.tokens import EstimatedTokens, TokenCounter
from ascend_pd.proxy.upstream import make_session

MAX_BODY_BYTES = 64 * 1024 * 1024  # long prompts with inline images fit; anything larger is refused with a 413


class Proxy:
    """The state one proxy process shares between requests."""

    def __init__(self, endpoints: Iterable[Endpoint], settings: ProxySettings, tokens: TokenCounter | None = None):
        self.settings = settings
        self.tokens = tokens or EstimatedTokens()
        self.pool = BackendPool(lambda: CircuitBreaker(settings.breaker_failures, settings.breaker_open_seconds))
        for endpoint in endpoints:
            self.pool.add(endpoint)
        self.inflight = 0
        self.metrics = ProxyMetrics(self.pool, inflight=lambda: self.inflight)
        self.metaserver = Metaserver()
        self.policies = {"prefill": make_policy(settings.prefill_policy, "prefill policy"),
                         "decode": make_policy(settings.decode_policy, "decode policy"),
                         "colocated": make_policy(settings.decode_policy, "decode policy")}
        self.env: FlowEnv | None = None

    def mode_now(self) -> str:
        """The configured flow, or colocated instances when no P/D pair can be formed right now."""
        mode = self.settings.mode
        if mode == "colocated" or not self.pool.has_candidate("colocated"):
            return mode
        return mode if self.pool.has_candidate("prefill") and self.pool.has_candidate("decode") else "colocated"

    def servable(self) -> bool:
        roles = ("colocated",) if self.mode_now() == "colocated" else ("prefill", "decode")
        return all(self.pool.has_candidate(role) for role in roles)


PROXY = web.AppKey("proxy", Proxy)


def build_app(proxy: Proxy) -> web.Application:
    app = web.Application(middlewares=[_client_errors], client_max_size=MAX_BODY_BYTES)
    app[PROXY] = proxy
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/v1/metaserver", _metaserver)
    if proxy.settings.admin_token:
        add_admin_routes(app, proxy.pool, proxy.settings.admin_token)
    app.cleanup_ctx.append(_lifecycle)
    return app


async def _lifecycle(app: web.Application):
    proxy = app[PROXY]
    settings = proxy.settings
    session = make_session(settings.timeouts)
    proxy.env = FlowEnv(session, proxy.pool, proxy.policies, proxy.metrics, settings, proxy.metaserver)
    checker = None
    if settings.health_interval > 0:
        checker = asyncio.create_task(check_forever(session, proxy.pool, settings.health_interval,
                                                    settings.timeouts.health))
    yield
    for task in [checker, *proxy.env.background]:
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    await session.close()


@web.middleware
async def _client_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except ClientError as exc:
        return exc.response()


async def _completions(request: web.Request) -> web.StreamResponse:
    proxy = request.app[PROXY]
    endpoint = request.path
    if proxy.inflight >= proxy.settings.max_inflight:
        proxy.metrics.request_outcome(endpoint, "429").inc()
        raise ClientError(429, f"the proxy is at its limit of {proxy.settings.max_inflight} requests in flight",
                          "rate_limit_exceeded", retry_after=proxy.settings.retry_after_seconds)
    arrived = time.perf_counter()
    proxy.inflight += 1
    outcome = "cancelled"  # stays so if the client leaves before an answer
    try:
        ctx = await _context(request, proxy)
        opened = await serve(ctx, proxy.env, proxy.mode_now())
        proxy.metrics.first_token_seconds.observe(time.perf_counter() - arrived)
        response = await relay(request, opened, proxy.metrics)
        outcome = "200"
        return response
    except ClientError as exc:
        outcome = str(exc.status)
        raise
    finally:
        proxy.inflight -= 1
        proxy.metrics.request_outcome(endpoint, outcome).inc()


async def _context(request: web.Request, proxy: Proxy) -> RequestContext:
    try:
        body = msgspec.json.decode(await request.read())
    except msgspec.DecodeError as exc:
        raise ClientError(400, f"the request body is not JSON: {exc}", "invalid_request_error") from None
    except web.HTTPRequestEntityTooLarge:
        raise ClientError(413, f"the request body is over {MAX_BODY_BYTES} bytes", "invalid_request_error") from None
    if not isinstance(body, dict):
        raise ClientError(400, "the request body must be a JSON object", "invalid_request_error")
    request_id = new_request_id()
    headers = {"X-Request-Id": request_id, "Content-Type": "application/json"}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    prompt = prompt_text(body)
    return RequestContext(request_id=request_id, path=request.path, body=body,
                          route=RouteRequest(prompt, proxy.tokens.count(prompt)), headers=headers,
                          streaming=is_streaming(body))


async def _models(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    for role in ("decode", "colocated", "prefill"):
        for backend in proxy.pool.candidates(role):
            try:
                async with proxy.env.session.get(backend.url + "/v1/models") as answer:
                    if answer.status == 200:
                        return web.Response(body=await answer.read(), content_type="application/json")
            except (aiohttp.ClientError, asyncio.TimeoutError):  # this one cannot answer: ask the next
                continue
    raise ClientError(503, "no backend answered /v1/models", "service_unavailable",
                      retry_after=proxy.settings.retry_after_seconds)


async def _health(request: web.Request) -> web.Response:
    proxy = request.app[PROXY]
    servable = proxy.servable()
    body = {"status": "ok" if servable else "unavailable", "mode": proxy.mode_now(), "inflight": proxy.inflight,
            "backends": [b.describe() for b in proxy.pool.all()]}
    return web.Response(status=200 if servable else 503, body=msgspec.json.encode(body),
                        content_type="application/json")


async def _metrics(request: web.Request) -> web.Response:
    body = request.app[PROXY].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def _metaserver(request: web.Request) -> web.Response:
    try:
        payload = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        raise ClientError(400, "metaserver body must be the JSON kv_transfer_params of D", "invalid_request_error")
    if not isinstance(payload, dict) or not request.app[PROXY].metaserver.deliver(payload):
        raise ClientError(404, "no request is waiting for these kv_transfer_params", "not_found")
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


async def start_server(proxy: Proxy, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve the proxy on host:port (0 picks a free port); returns the runner to clean up and the base URL.
    A client that disconnects cancels its handler, which is what closes the upstream requests."""
    runner = web.AppRunner(build_app(proxy), handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port, reuse_address=True).start()
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, f"http://{bound_host}:{bound_port}"
