"""Admin endpoints: the backend table (read it, put a newer one), changes to it one backend at a time (add, drain,
remove), and the live workload. They exist only when a token is configured."""

from __future__ import annotations

import hmac
import time
from typing import Any

import msgspec

from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.errors import InputError
from ascend_pd.proxy.backend_table import TableEntry, decode_table, draining, with_entry, without
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.endpoints import ROLES, endpoint_from_url
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.table_keeper import TableKeeper
from ascend_pd.proxy.wire.server import Handler, Request, Response
from ascend_pd.proxy.workload_window import (WORKLOAD_PARTS, WindowContents, WorkloadWindow, encode_contents,
                                             encode_parts, summarise)


class BackendChange(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    role: str | None = None
    instance: str | None = None  # the name metrics and logs give it (default: host:port)
    dp_rank: int = 0
    kv: KVAddress | None = None


def workload_document(pool: BackendPool, window: WorkloadWindow, parts: list[WindowContents]) -> dict:
    """GET /v1/workload's answer over `parts` (this worker's window, or every worker's)."""
    return summarise(parts, window.seconds, time.time(), [b.describe() for b in pool.all()])


def admin_routes(keeper: TableKeeper, token: str, window: WorkloadWindow | None = None
                 ) -> dict[tuple[str, str], Handler]:
    """(method, path) -> handler of every admin endpoint."""
    window = window or WorkloadWindow()
    pool = keeper.pool
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
        entry = TableEntry(endpoint.url, endpoint.role, change.instance or endpoint.instance, change.dp_rank,
                           change.kv)
        keeper.offer(with_entry(keeper.table, entry))
        return _json(pool.get(endpoint.url).describe())

    async def drain(request: Request) -> Response:
        url = _normalized(await read_change(request))
        if keeper.table.entry(url) is None:
            raise ClientError(404, "no such backend", "not_found")
        keeper.offer(draining(keeper.table, url))
        return _json(pool.get(url).describe())

    async def remove(request: Request) -> Response:
        url = _normalized(await read_change(request))
        backend = pool.get(url)
        if keeper.table.entry(url) is None or backend is None:
            raise ClientError(404, "no such backend", "not_found")
        keeper.offer(without(keeper.table, url))
        return _json(backend.describe())

    async def table(request: Request) -> Response:
        """The table this worker serves, and the generation each worker of the proxy serves (the lowest is what
        the whole proxy is sure to serve)."""
        authorized(request)
        return _json({**msgspec.to_builtins(keeper.table), "worker_generations": [keeper.table.generation]})

    async def put_table(request: Request) -> Response:
        authorized(request)
        try:
            offered = decode_table(request.body, "PUT /admin/table")
        except InputError as exc:
            raise ClientError(400, exc.render(), "invalid_request_error") from None
        applied = keeper.offer(offered)
        return _json({"generation": keeper.table.generation, "applied": applied})

    async def listing(request: Request) -> Response:
        authorized(request)
        return _json([b.describe() for b in pool.all()])

    async def workload(request: Request) -> Response:
        authorized(request)
        return _json(workload_document(pool, window, [window.snapshot()]))

    async def workload_samples(request: Request) -> Response:
        authorized(request)
        return Response(encode_contents(window.snapshot()))

    async def workload_parts(request: Request) -> Response:
        authorized(request)
        return Response(encode_parts([window.snapshot()]))

    return {("GET", "/v1/workload"): workload, ("GET", "/v1/workload/samples"): workload_samples,
            ("GET", WORKLOAD_PARTS): workload_parts,
            ("GET", "/admin/backends"): listing, ("POST", "/admin/backends"): add,
            ("POST", "/admin/backends/drain"): drain, ("POST", "/admin/backends/remove"): remove,
            ("GET", "/admin/table"): table, ("PUT", "/admin/table"): put_table}


def _normalized(change: BackendChange) -> str:
    return change.url.rstrip("/") if "://" in change.url else f"http://{change.url.rstrip('/')}"


def _json(data: Any) -> Response:
    return Response(msgspec.json.encode(data))
