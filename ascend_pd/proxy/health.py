"""Active health checks: GET /health on every backend at a fixed interval, feeding its circuit breaker."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from ascend_pd.proxy.backends import Backend, BackendPool
from ascend_pd.proxy.settings import BackendTimeouts

log = logging.getLogger("ascend_pd.proxy.health")


def make_control_session(timeouts: BackendTimeouts) -> aiohttp.ClientSession:
    """The session for the control plane: health checks, engine metrics, /v1/models. Requests go through the
    proxy's own client (ascend_pd.proxy.wire)."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True)
    timeout = aiohttp.ClientTimeout(total=timeouts.total, connect=timeouts.connect, sock_read=timeouts.read)
    # no cookie jar: a proxy must not carry one client's backend cookies over to the next client
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


async def probe(session: aiohttp.ClientSession, backend: Backend, timeout: float, busy_grace: float = 0.0) -> bool:
    """GET /health and feed the breaker. A probe that gets no answer within `timeout` from a backend heard from in
    the last `busy_grace` seconds (a proxied answer began or a token streamed) counts as no failure: an engine
    serving on a loaded host can be slow to answer /health, and taking it out of service would strand the requests
    routed to it. A refused connection, an error status, or silence from a backend not heard from counts."""
    failure = None
    try:
        async with session.get(backend.url + "/health", timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            await response.read()
            if response.status != 200:
                failure = f"/health answered {response.status}"
    except asyncio.TimeoutError:
        if backend.breaker.heard_within(busy_grace):
            log.debug("%s backend %s: no answer to /health within %g s, but it is serving", backend.role,
                      backend.url, timeout)
            return True
        failure = f"no answer to /health within {timeout:g} s"
    except aiohttp.ClientError as exc:
        failure = f"{type(exc).__name__}: {exc}"
    was_routable = backend.routable()
    if failure is None:
        backend.breaker.record_success()
    else:
        backend.breaker.record_failure()
    if was_routable != backend.routable():
        if failure is None:
            log.warning("%s backend %s is up", backend.role, backend.url)
        else:
            log.warning("%s backend %s is down (%s)", backend.role, backend.url, failure)
    return failure is None


async def check_forever(session: aiohttp.ClientSession, pool: BackendPool, interval: float, timeout: float) -> None:
    """Probe every backend every `interval` seconds, for the proxy's life: a probe that fails in a way nobody
    foresaw (a bug, an error of a library) is logged, the first of its kind with its traceback, and the checks go
    on; ended, they would leave every breaker as it was, routing to dead backends and never back to recovered ones."""
    # heard from since the previous round of probes began: serving, whatever this round's probe says
    busy_grace = interval + timeout
    logged: set[type] = set()  # kinds of unexpected failure already logged: one a tick would flood the log
    while True:
        backends = pool.all()
        outcomes = await asyncio.gather(*(probe(session, b, timeout, busy_grace) for b in backends),
                                        return_exceptions=True)
        for backend, outcome in zip(backends, outcomes):
            if isinstance(outcome, Exception) and type(outcome) not in logged:
                logged.add(type(outcome))
                log.error("health check of %s backend %s failed unexpectedly (%s); the checks go on, and say no more "
                          "of this kind of failure", backend.role, backend.url, type(outcome).__name__,
                          exc_info=outcome)
        await asyncio.sleep(interval)
