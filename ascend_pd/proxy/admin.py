"""Admin endpoints to add, drain and remove backends at run time; they exist only when a token is configured."""

from __future__ import annotations

import hmac
from dataclasses import replace
import time
from typing import Any

import msgspec

from ascend_pd.errors import InputError
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.endpoints import ROLES, KVAddress, endpoint_from_url
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.wire.server import Handler, Request, Response
from ascend_pd.proxy.workload_window import WindowContents, WorkloadWindow, encode_contents, summarise


class KVChange(msgspec.Struct, forbid_unknown_fields=True):
    """Where the added instance's KV connector listens (push mode hands it to D): as deployment.yaml gives it."""

    engine_id: str
    host: str
    port: int
    tp_size: int = 1
    dp_rank: int = 0
    rank_hosts: tuple[str, ...] = ()  # each TP rank's host, when the ranks span nodes


class BackendChange(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    role: str | None = None
    instance: str | None = None  # the name metrics and logs give it (default: host:port)
    dp_rank: int = 0
    kv: KVChange | None = None


def workload_document(pool: BackendPool, window: WorkloadWindow, contents: WindowContents) -> dict:
    """GET /v1/workload's answer over `contents` (this worker's window, or every worker's)."""
    return summarise(contents, window.seconds, window.started_at, time.time(), [b.describe() for b in pool.all()])


def admin_routes(pool: BackendPool, token: str, window: WorkloadWindow | None = None) -> dict[tuple[str, str], Handler]:
    """(method, path) -> handler of every admin endpoint."""
    window = window or WorkloadWindow()
    expected = f"Bearer {token}".encode()

    def authorized(request: Request) -> None:
        if not hmac.compare_digest(request.headers.get("authorization", "").encode(), expected):
            raise ClientError(401, "admin endpoints need 'Authorization: Bearer <admin token>'", "unauthorized")

    async def read_change(request: Request) -> BackendChange:
        authorized(request)
        try:
            return msgspec.json.decode(request.body, type=BackendChange)
        except msgspec.DecodeError as exc:
            raise ClientError(400, f"body must be {{\"url\": ..., \"role\": ...}}: {exc}", "invalid_request_error")

    async def add(request: Request) -> Response:
        change = await read_change(request)
        if change.role not in ROLES:
            raise ClientError(400, f"role must be one of {', '.join(ROLES)}", "invalid_request_error")
        try:
            endpoint = endpoint_from_url(change.url, change.role, "url")
        except InputError as exc:
            raise ClientError(400, exc.render(), "invalid_request_error") from None
        if change.instance or change.kv:
            kv = KVAddress(**msgspec.structs.asdict(change.kv)) if change.kv else None
            endpoint = replace(endpoint, instance=change.instance or endpoint.instance, dp_rank=change.dp_rank, kv=kv)
        return _json(pool.add(endpoint).describe())

    async def drain(request: Request) -> Response:
        backend = pool.get(_normalized(await read_change(request)))
        if backend is None:
            raise ClientError(404, "no such backend", "not_found")
        backend.draining = True
        return _json(backend.describe())

    async def remove(request: Request) -> Response:
        backend = pool.remove(_normalized(await read_change(request)))
        if backend is None:
            raise ClientError(404, "no such backend", "not_found")
        return _json(backend.describe())

    async def listing(request: Request) -> Response:
        authorized(request)
        return _json([b.describe() for b in pool.all()])

    async def workload(request: Request) -> Response:
        authorized(request)
        return _json(workload_document(pool, window, window.snapshot()))

    async def workload_samples(request: Request) -> Response:
        authorized(request)
        return Response(encode_contents(window.snapshot()))

    return {("GET", "/v1/workload"): workload, ("GET", "/v1/workload/samples"): workload_samples,
            ("GET", "/admin/backends"): listing, ("POST", "/admin/backends"): add,
            ("POST", "/admin/backends/drain"): drain, ("POST", "/admin/backends/remove"): remove}


def _normalized(change: BackendChange) -> str:
    return change.url.rstrip("/") if "://" in change.url else f"http://{change.url.rstrip('/')}"


def _json(data: Any) -> Response:
    return Response(msgspec.json.encode(data))
