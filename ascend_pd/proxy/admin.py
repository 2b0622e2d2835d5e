"""Admin endpoints to add, drain and remove backends at run time; they exist only when a token is configured."""

from __future__ import annotations

import hmac
from typing import Any

import msgspec
from aiohttp import web

from ascend_pd.errors import InputError
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.endpoints import ROLES, endpoint_from_url
from ascend_pd.proxy.failures import ClientError


class BackendChange(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    role: str | None = None


def add_admin_routes(app: web.Application, pool: BackendPool, token: str) -> None:
    expected = f"Bearer {token}".encode()

    def authorized(request: web.Request) -> None:
        if not hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected):
            raise ClientError(401, "admin endpoints need 'Authorization: Bearer <admin token>'", "unauthorized")

    async def read_change(request: web.Request) -> BackendChange:
        authorized(request)
        try:
            return msgspec.json.decode(await request.read(), type=BackendChange)
        except msgspec.DecodeError as exc:
            raise ClientError(400, f"body must be {{\"url\": ..., \"role\": ...}}: {exc}", "invalid_request_error")

    async def add(request: web.Request) -> web.Response:
        change = await read_change(request)
        if change.role not in ROLES:
            raise ClientError(400, f"role must be one of {', '.join(ROLES)}", "invalid_request_error")
        try:
            endpoint = endpoint_from_url(change.url, change.role, "url")
        except InputError as exc:
            raise ClientError(400, exc.render(), "invalid_request_error") from None
        return _json(pool.add(endpoint).describe())

    async def drain(request: web.Request) -> web.Response:
        backend = pool.get(_normalized(await read_change(request)))
        if backend is None:
            raise ClientError(404, "no such backend", "not_found")
        backend.draining = True
        return _json(backend.describe())

    async def remove(request: web.Request) -> web.Response:
        backend = pool.remove(_normalized(await read_change(request)))
        if backend is None:
            raise ClientError(404, "no such backend", "not_found")
        return _json(backend.describe())

    async def listing(request: web.Request) -> web.Response:
        authorized(request)
        return _json([b.describe() for b in pool.all()])

    app.router.add_get("/admin/backends", listing)
    app.router.add_post("/admin/backends", add)
    app.router.add_post("/admin/backends/drain", drain)
    app.router.add_post("/admin/backends/remove", remove)


def _normalized(change: BackendChange) -> str:
    return change.url.rstrip("/") if "://" in change.url else f"http://{change.url.rstrip('/')}"


def _json(data: Any) -> web.Response:
    return web.Response(body=msgspec.json.encode(data), content_type="application/json")
