"""Active health checks: GET /health on every backend at a fixed interval, feeding its circuit breaker."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from ascend_pd.proxy.backends import Backend, BackendPool
from ascend_pd.proxy.settings import Timeouts

log = logging.getLogger("ascend_pd.proxy.health")


def make_control_session(timeouts: Timeouts) -> aiohttp.ClientSession:
    """The session for the control plane: health checks, engine metrics, /v1/models. Requests go through the
    proxy's own client (ascend_pd.proxy.wire)."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True)
    timeout = aiohttp.ClientTimeout(total=timeouts.total, connect=timeouts.connect, sock_read=timeouts.read)
    # no cookie jar: a proxy must not carry one client's backend cookies over to the next client
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


async def probe(session: aiohttp.ClientSession, backend: Backend, timeout: float) -> bool:
    try:
        async with session.get(backend.url + "/health", timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            await response.read()
            healthy = response.status == 200
    except (aiohttp.ClientError, asyncio.TimeoutError):
        healthy = False
    was_routable = backend.routable()
    if healthy:
        backend.breaker.record_success()
    else:
        backend.breaker.record_failure()
    if was_routable != backend.routable():
        log.warning("%s backend %s is %s", backend.role, backend.url, "up" if backend.routable() else "down")
    return healthy


async def check_forever(session: aiohttp.ClientSession, pool: BackendPool, interval: float, timeout: float) -> None:
    while True:
        await asyncio.gather(*(probe(session, b, timeout) for b in pool.all()))
        await asyncio.sleep(interval)
