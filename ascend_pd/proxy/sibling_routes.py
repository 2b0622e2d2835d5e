"""The endpoints that must act for the whole host when a proxy runs several workers: a change to the backend table
reaches every worker (as the table itself, so every worker holds the same generation), the table's answer says which
generation each worker serves, a metaserver post finds the worker whose request waits for it, and /metrics and the
workload speak for all of them."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Callable

import aiohttp
import msgspec

from ascend_pd.proxy.backend_table import encode_table
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.metrics import merge_expositions
from ascend_pd.proxy.siblings import SIBLING_HEADER, Siblings
from ascend_pd.proxy.table_keeper import TableKeeper
from ascend_pd.proxy.wire.server import Handler, Request, Response
from ascend_pd.proxy.workload_window import WORKLOAD_PARTS, WindowContents, decode_contents, encode_parts

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TABLE_CHANGES = (("POST", "/admin/backends"), ("POST", "/admin/backends/drain"), ("POST", "/admin/backends/remove"),
                 ("PUT", "/admin/table"))


class SiblingRoutes:
    """One worker's routes (`local`) with table changes, the metaserver, /metrics and the workload window made
    host-wide; the rest unchanged. `workload_of` summarises the workers' windows into GET /v1/workload's answer;
    `session` and `timeout` are for the calls to the other workers."""

    def __init__(self, local: dict[tuple[str, str], Handler], siblings: Siblings, session: aiohttp.ClientSession,
                 timeout: float, workload_of: Callable[[list[WindowContents]], dict], keeper: TableKeeper):
        self.local, self.siblings, self.session, self.timeout = local, siblings, session, timeout
        self.workload_of, self.keeper = workload_of, keeper

    def routes(self) -> dict[tuple[str, str], Handler]:
        shared = dict(self.local)
        if ("GET", "/v1/workload") in self.local:
            shared[("GET", "/v1/workload")] = self.workload
            shared[("GET", WORKLOAD_PARTS)] = self.workload_parts
        if ("GET", "/admin/table") in self.local:
            for change in TABLE_CHANGES:
                shared[change] = partial(self._table_change, self.local[change])
            shared[("GET", "/admin/table")] = self.table
        shared[("POST", "/v1/metaserver")] = self.metaserver
        shared[("GET", "/metrics")] = self.metrics
        return shared

    async def _tell_siblings(self, request: Request) -> list[tuple[int, bytes]]:
        headers = {"Content-Type": "application/json"}
        if "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        return await self.siblings.tell_all(self.session, request.method, request.path, request.body, headers,
                                            self.timeout)

    async def _tell_table(self, request: Request) -> None:
        """Every other worker gets this worker's table; one that does not confirm finds it in the file."""
        table = dataclasses.replace(request, method="PUT", path="/admin/table", body=encode_table(self.keeper.table))
        missing = sum(status != 200 for status, _ in await self._tell_siblings(table))
        if missing:
            raise ClientError(502, f"applied on this worker, but {missing} of {self.siblings.load.workers - 1} other "
                                   "workers did not confirm; send the same change again", "partial_change")

    async def _table_change(self, handler: Handler, request: Request) -> Response:
        answer = await handler(request)  # refused here (401, 400, 404): refused everywhere, nothing to tell
        if not _relayed(request):
            await self._tell_table(request)
        return answer

    async def table(self, request: Request) -> Response:
        local = await self.local[("GET", "/admin/table")](request)  # refused here (401): refused everywhere
        if _relayed(request):
            return local
        answer = msgspec.json.decode(local.body)
        for status, body in await self._tell_siblings(request):
            # a worker that does not answer serves no generation anyone can count on
            answer["worker_generations"] += msgspec.json.decode(body)["worker_generations"] if status == 200 else [-1]
        return Response(msgspec.json.encode(answer))

    async def metaserver(self, request: Request) -> Response:
        try:
            return await self.local[("POST", "/v1/metaserver")](request)
        except ClientError as refused:
            if _relayed(request) or refused.status != 404:
                raise
            if not any(status == 200 for status, _ in await self._tell_siblings(request)):
                raise
            return Response(b'{"status":"ok"}')

    async def metrics(self, request: Request) -> Response:
        local = await self.local[("GET", "/metrics")](request)
        if _relayed(request):
            return local
        others = [body for status, body in await self._tell_siblings(request) if status == 200]
        return Response(merge_expositions([local.body, *others]), content_type=METRICS_TYPE)

    async def _every_window(self, request: Request) -> list[WindowContents]:
        local = await self.local[("GET", "/v1/workload/samples")](request)  # refused here (401): refused everywhere
        parts = [decode_contents(local.body)]
        answers = await self._tell_siblings(_as_path(request, "/v1/workload/samples"))
        for status, body in answers:
            if status != 200:
                raise ClientError(502, f"{sum(s != 200 for s, _ in answers)} of {self.siblings.load.workers - 1} "
                                       "other workers did not share their requests; ask again", "partial_workload")
            parts.append(decode_contents(body))
        return parts

    async def workload(self, request: Request) -> Response:
        return Response(msgspec.json.encode(self.workload_of(await self._every_window(request))))

    async def workload_parts(self, request: Request) -> Response:
        return Response(encode_parts(await self._every_window(request)))


def _relayed(request: Request) -> bool:
    """Sent by another worker, which tells the rest itself."""
    return SIBLING_HEADER.lower() in request.headers


def _as_path(request: Request, path: str) -> Request:
    return dataclasses.replace(request, path=path)
