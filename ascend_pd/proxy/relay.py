"""Sending a started backend answer to the client: bytes pass through untouched; a stream that breaks after the
first byte ends with an SSE error event, never as a silently truncated 200."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from ascend_pd.proxy.failures import sse_error_event
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.upstream import Opened

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE_MARK = b"[DONE]"


async def relay(request: web.Request, opened: Opened, metrics: ProxyMetrics) -> web.StreamResponse:
    try:
        if not opened.streaming:
            return web.Response(body=opened.first, content_type="application/json")
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(opened.first)
        tail = opened.first[-16:]
        try:
            async for chunk in opened.response.content.iter_any():
                await response.write(chunk)
                tail = (tail + chunk)[-16:]
            broken = None if DONE_MARK in tail else "the backend ended the stream before [DONE]"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            broken = f"the backend stream broke: {type(exc).__name__} {exc}".strip()
        if broken:
            metrics.stream_errors.inc()
            await response.write(sse_error_event(broken))
        await response.write_eof()
        return response
    finally:
        opened.close()
