"""The endpoints that must act for the whole host when a proxy runs several workers: a change to the backend table
reaches every worker (as the table itself, so every worker holds the same generation), the table's answer says which
generation each worker serves, a metaserver post finds the worker whose request waits for it, and /metrics and the
workload speak for all of them."""

from __future__ import annotations

import dataclasses
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
TABLE_CHANGES = ("/admin/backends", "/admin/backends/drain", "/admin/backends/remove")


def share_with_siblings(routes: dict[tuple[str, str], Handler], siblings: Siblings,
                        session: Callable[[], aiohttp.ClientSession], timeout: float,
                        workload_of: Callable[[list[WindowContents]], dict] | None = None,
                        keeper: TableKeeper | None = None) -> dict[tuple[str, str], Handler]:
    """`routes` with table changes, the metaserver, /metrics and the workload window made host-wide; the rest
    unchanged. `workload_of` summarises the workers' windows into GET /v1/workload's answer."""

    def relayed(request: Request) -> bool:
        return SIBLING_HEADER.lower() in request.headers

    async def tell_siblings(request: Request) -> list[tuple[int, bytes]]:
        headers = {"Content-Type": "application/json"}
        if "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        return await siblings.tell_all(session(), request.method, request.path, request.body, headers, timeout)

    async def tell_table(request: Request) -> None:
        """Every other worker gets this worker's table; one that does not confirm finds it in the file."""
        table = dataclasses.replace(request, method="PUT", path="/admin/table", body=encode_table(keeper.table))
        missing = sum(status != 200 for status, _ in await tell_siblings(table))
        if missing:
            raise ClientError(502, f"applied on this worker, but {missing} of {siblings.load.workers - 1} other "
                                   "workers did not confirm; send the same change again", "partial_change")

    def table_change(handler: Handler) -> Handler:
        async def change(request: Request) -> Response:
            answer = await handler(request)  # refused here (401, 400, 404): refused everywhere, nothing to tell
            if not relayed(request):
                await tell_table(request)
            return answer
        return change

    async def table(request: Request) -> Response:
        local = await routes[("GET", "/admin/table")](request)  # refused here (401): refused everywhere
        if relayed(request):
            return local
        answer = msgspec.json.decode(local.body)
        for status, body in await tell_siblings(request):
            # a worker that does not answer serves no generation anyone can count on
            answer["worker_generations"] += msgspec.json.decode(body)["worker_generations"] if status == 200 else [-1]
        return Response(msgspec.json.encode(answer))

    async def metaserver(request: Request) -> Response:
        try:
            return await routes[("POST", "/v1/metaserver")](request)
        except ClientError as refused:
            if relayed(request) or refused.status != 404:
                raise
            if not any(status == 200 for status, _ in await tell_siblings(request)):
                raise
            return Response(b'{"status":"ok"}')

    async def metrics(request: Request) -> Response:
        local = await routes[("GET", "/metrics")](request)
        if relayed(request):
            return local
        others = [body for status, body in await tell_siblings(request) if status == 200]
        return Response(merge_expositions([local.body, *others]), content_type=METRICS_TYPE)

    async def every_window(request: Request) -> list[WindowContents]:
        local = await routes[("GET", "/v1/workload/samples")](request)  # refused here (401): refused everywhere
        parts = [decode_contents(local.body)]
        answers = await tell_siblings(_as_path(request, "/v1/workload/samples"))
        for status, body in answers:
            if status != 200:
                raise ClientError(502, f"{sum(s != 200 for s, _ in answers)} of {siblings.load.workers - 1} other "
                                       "workers did not share their requests; ask again", "partial_workload")
            parts.append(decode_contents(body))
        return parts

    async def workload(request: Request) -> Response:
        return Response(msgspec.json.encode(workload_of(await every_window(request))))

    async def workload_parts(request: Request) -> Response:
        return Response(encode_parts(await every_window(request)))

    shared = dict(routes)
    if workload_of is not None and ("GET", "/v1/workload") in routes:
        shared[("GET", "/v1/workload")] = workload
        shared[("GET", WORKLOAD_PARTS)] = workload_parts
    if keeper is not None and ("GET", "/admin/table") in routes:
        for path in TABLE_CHANGES:
            shared[("POST", path)] = table_change(routes[("POST", path)])
        shared[("PUT", "/admin/table")] = table_change(routes[("PUT", "/admin/table")])
        shared[("GET", "/admin/table")] = table
    shared[("POST", "/v1/metaserver")] = metaserver
    shared[("GET", "/metrics")] = metrics
    return shared


def _as_path(request: Request, path: str) -> Request:
    return dataclasses.replace(request, path=path)
