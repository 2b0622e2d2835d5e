"""Admin endpoints: the backend table (read it, put a newer one over the one its writer read), changes to it one
backend at a time (add, drain, remove), and the live workload. They exist only when a token is configured."""

from __future__ import annotations

import hmac
import time
from typing import Any

import msgspec

from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.errors import InputError
from ascend_pd.proxy.backend_table import TableEntry, TableWrite, decode_table, draining, with_entry, without
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.endpoints import ROLES, endpoint_from_url
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.siblings import SIBLING_HEADER
from ascend_pd.proxy.table_keeper import TableKeeper
from ascend_pd.proxy.wire.server import Handler, Request, Response
from ascend_pd.proxy.workload_window import (WORKLOAD_PARTS, WindowContents, WorkloadWindow, encode_contents,
                                             encode_parts, summarise)

# a table of thousands of backends with their KV addresses (a few hundred bytes each) fits
MAX_ADMIN_BODY_BYTES = 4 * 1024 * 1024


class BackendChange(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    role: str | None = None
    instance: str | None = None  # the name metrics and logs give it (default: host:port)
    dp_rank: int = 0
    kv: KVAddress | None = None


def workload_document(pool: BackendPool, window: WorkloadWindow, parts: list[WindowContents]) -> dict:
    """GET /v1/workload's answer over `parts` (this worker's window, or every worker's)."""
    return summarise(parts, window.seconds, time.time(), [b.describe() for b in pool.all()])


def carries_admin_token(request: Request, token: str | None) -> bool:
    """Whether the request sends `Authorization: Bearer <token>` (compared in constant time); never without a token."""
    return bool(token) and hmac.compare_digest(request.headers.get("authorization", "").encode(),
                                               f"Bearer {token}".encode())


class AdminRoutes:
    """One worker's admin endpoints over its backend table (`keeper`) and its workload window; each call must carry
    the admin token."""

    def __init__(self, keeper: TableKeeper, token: str, window: WorkloadWindow):
        self.keeper, self.pool, self.window = keeper, keeper.pool, window
        self._token = token

    def routes(self) -> dict[tuple[str, str], Handler]:
        """(method, path) -> handler of every admin endpoint."""
        return {("GET", "/v1/workload"): self.workload, ("GET", "/v1/workload/samples"): self.workload_samples,
                ("GET", WORKLOAD_PARTS): self.workload_parts,
                ("GET", "/admin/backends"): self.listing, ("POST", "/admin/backends"): self.add,
                ("POST", "/admin/backends/drain"): self.drain, ("POST", "/admin/backends/remove"): self.remove,
                ("GET", "/admin/table"): self.table, ("PUT", "/admin/table"): self.put_table}

    def _authorize(self, request: Request) -> None:
        if not carries_admin_token(request, self._token):
            raise ClientError(401, "admin endpoints need 'Authorization: Bearer <admin token>'", "unauthorized")

    def _read_body(self, request: Request) -> bytes:
        """The body of an authorized call, within the admin limit (the public listener's is a prompt's)."""
        self._authorize(request)
        if len(request.body) > MAX_ADMIN_BODY_BYTES:
            raise ClientError(413, f"admin request bodies are at most {MAX_ADMIN_BODY_BYTES} bytes", "too_large")
        return request.body

    def _read_change(self, request: Request) -> BackendChange:
        self._read_body(request)
        try:
            return msgspec.json.decode(request.body, type=BackendChange)
        except msgspec.DecodeError as exc:
            raise ClientError(400, f"body must be {{\"url\": ..., \"role\": ...}}: {exc}", "invalid_request_error")

    async def add(self, request: Request) -> Response:
        change = self._read_change(request)
        if change.role not in ROLES:
            raise ClientError(400, f"role must be one of {', '.join(ROLES)}", "invalid_request_error")
        try:
            endpoint = endpoint_from_url(change.url, change.role, "url")
        except InputError as exc:
            raise ClientError(400, exc.render(), "invalid_request_error") from None
        entry = TableEntry(endpoint.url, endpoint.role, change.instance or endpoint.instance, change.dp_rank,
                           change.kv)
        self.keeper.offer(with_entry(self.keeper.table, entry))
        return _json(self.pool.get(endpoint.url).describe())

    async def drain(self, request: Request) -> Response:
        url = _normalized(self._read_change(request))
        if self.keeper.table.entry(url) is None:
            raise ClientError(404, "no such backend", "not_found")
        self.keeper.offer(draining(self.keeper.table, url))
        return _json(self.pool.get(url).describe())

    async def remove(self, request: Request) -> Response:
        url = _normalized(self._read_change(request))
        backend = self.pool.get(url)
        if self.keeper.table.entry(url) is None or backend is None:
            raise ClientError(404, "no such backend", "not_found")
        self.keeper.offer(without(self.keeper.table, url))
        return _json(backend.describe())

    async def table(self, request: Request) -> Response:
        """The table this worker serves, and the generation each worker of the proxy serves (the lowest is what
        the whole proxy is sure to serve)."""
        self._authorize(request)
        table = self.keeper.table
        return _json({**msgspec.to_builtins(table), "worker_generations": [table.generation]})

    async def put_table(self, request: Request) -> Response:
        """A compare-and-swap: the body is the new table with `expected_generation`, the generation of the table
        its writer made it from. A worker that serves a later table (other than this one, pushed before) took a
        change that writer never saw, which this table would undo: 409 with the generation served, to read again and
        redo the change on it. One that serves an earlier table only missed a push, and takes it. A sibling worker's
        relay carries the table another worker applied, and needs no condition."""
        try:
            offered = decode_table(self._read_body(request), "PUT /admin/table", TableWrite)
        except InputError as exc:
            raise ClientError(400, exc.render(), "invalid_request_error") from None
        expected, served = offered.expected_generation, self.keeper.table.generation
        if expected is None and SIBLING_HEADER.lower() not in request.headers:
            raise ClientError(400, "PUT /admin/table needs expected_generation: the generation of the table this "
                                   f"one was made from (GET /admin/table; {served} now)", "invalid_request_error")
        if expected is not None and offered.generation <= expected:
            raise ClientError(400, f"generation {offered.generation} is not above expected_generation {expected}: "
                                   "a change is the next generation", "invalid_request_error")
        if expected is not None and served > expected and self.keeper.table != offered.table():
            message = (f"the proxy serves backend table generation {served}, made after generation {expected} this "
                       "one was made from: read it again (GET /admin/table) and make the change on it")
            raise ClientError(409, message, "conflict", body=msgspec.json.encode(
                {"error": {"message": message, "type": "conflict", "code": 409}, "generation": served}))
        applied = self.keeper.offer(offered.table())
        return _json({"generation": self.keeper.table.generation, "applied": applied})

    async def listing(self, request: Request) -> Response:
        self._authorize(request)
        return _json([b.describe() for b in self.pool.all()])

    async def workload(self, request: Request) -> Response:
        self._authorize(request)
        return _json(workload_document(self.pool, self.window, [self.window.snapshot()]))

    async def workload_samples(self, request: Request) -> Response:
        self._authorize(request)
        return Response(encode_contents(self.window.snapshot()))

    async def workload_parts(self, request: Request) -> Response:
        self._authorize(request)
        return Response(encode_parts([self.window.snapshot()]))


def _normalized(change: BackendChange) -> str:
    return change.url.rstrip("/") if "://" in change.url else f"http://{change.url.rstrip('/')}"


def _json(data: Any) -> Response:
    return Response(msgspec.json.encode(data))
