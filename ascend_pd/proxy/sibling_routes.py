"""The endpoints that must act for the whole host when a proxy runs several workers: an admin change reaches every
worker, a metaserver post finds the worker whose request waits for it, and /metrics speaks for all of them."""

from __future__ import annotations

import dataclasses
from typing import Callable

import aiohttp
import msgspec

from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.metrics import merge_expositions
from ascend_pd.proxy.siblings import SIBLING_HEADER, Siblings
from ascend_pd.proxy.wire.server import Handler, Request, Response
from ascend_pd.proxy.workload_window import WindowContents, decode_contents

METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# what a worker may answer to an admin change it already has: a drained or removed backend it no longer knows
CONFIRMS = {"/admin/backends": {200}, "/admin/backends/drain": {200, 404}, "/admin/backends/remove": {200, 404}}


def share_with_siblings(routes: dict[tuple[str, str], Handler], siblings: Siblings,
                        session: Callable[[], aiohttp.ClientSession], timeout: float,
                        workload_of: Callable[[WindowContents], dict] | None = None,
                        ) -> dict[tuple[str, str], Handler]:
    """`routes` with admin changes, the metaserver, /metrics and the workload window made host-wide; the rest
    unchanged. `workload_of` summarises window contents into GET /v1/workload's answer."""

    def relayed(request: Request) -> bool:
        return SIBLING_HEADER.lower() in request.headers

    async def tell_siblings(request: Request) -> list[tuple[int, bytes]]:
        headers = {"Content-Type": "application/json"}
        if "authorization" in request.headers:
            headers["Authorization"] = request.headers["authorization"]
        return await siblings.tell_all(session(), request.method, request.path, request.body, headers, timeout)

    def admin_change(handler: Handler, confirms: set[int]) -> Handler:
        async def change(request: Request) -> Response:
            answer = await handler(request)  # refused here (401, 400, 404): refused everywhere, nothing to tell
            if relayed(request):
                return answer
            missing = sum(status not in confirms for status, _ in await tell_siblings(request))
            if missing:
                raise ClientError(502, f"applied on this worker, but {missing} of {siblings.load.workers - 1} other "
                                       "workers did not confirm; send the same change again", "partial_change")
            return answer
        return change

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

    async def workload(request: Request) -> Response:
        local = await routes[("GET", "/v1/workload/samples")](request)  # refused here (401): refused everywhere
        contents = decode_contents(local.body)
        answers = await tell_siblings(_as_path(request, "/v1/workload/samples"))
        for status, body in answers:
            if status != 200:
                raise ClientError(502, f"{sum(s != 200 for s, _ in answers)} of {siblings.load.workers - 1} other "
                                       "workers did not share their requests; ask again", "partial_workload")
            contents = contents.merged(decode_contents(body))
        return Response(msgspec.json.encode(workload_of(contents)))

    shared = dict(routes)
    if workload_of is not None and ("GET", "/v1/workload") in routes:
        shared[("GET", "/v1/workload")] = workload
    for (method, path), handler in routes.items():
        if method == "POST" and path in CONFIRMS:
            shared[(method, path)] = admin_change(handler, CONFIRMS[path])
    shared[("POST", "/v1/metaserver")] = metaserver
    shared[("GET", "/metrics")] = metrics
    return shared


def _as_path(request: Request, path: str) -> Request:
    return dataclasses.replace(request, path=path)
