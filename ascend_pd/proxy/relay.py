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
DONE_EVENT = b"data: [DONE]\n\n"  # the last event of an OpenAI stream: nothing may follow it
TAIL = len(DONE_EVENT)


async def relay(request: web.Request, opened: Opened, metrics: ProxyMetrics) -> web.StreamResponse:
    try:
        if not opened.streaming:
            return web.Response(body=opened.first, content_type="application/json")
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        if opened.response is None:  # the whole stream is already here
            await response.write_eof(opened.first)
        else:
            await _relay_stream(response, opened, metrics)
        return response
    finally:
        opened.close()


async def _relay_stream(response: web.StreamResponse, opened: Opened, metrics: ProxyMetrics) -> None:
    upstream = opened.response.content
    chunk = opened.first
    tail = chunk[-TAIL:]
    try:
        while not tail.endswith(DONE_EVENT):
            await response.write(chunk)
            chunk = await upstream.readany()
            if not chunk:  # the backend ended its body without a final [DONE] event
                break
            tail = chunk[-TAIL:] if len(chunk) >= TAIL else (tail + chunk)[-TAIL:]
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        broken = f"the backend stream broke: {type(exc).__name__} {exc}".strip()
    else:
        if chunk:
            await _finish_after_done(response, upstream, chunk)
            return
        broken = None if DONE_MARK in tail else "the backend ended the stream before [DONE]"
    if broken:
        metrics.stream_errors.inc()
        await response.write(sse_error_event(broken))
    await response.write_eof()


async def _finish_after_done(response: web.StreamResponse, upstream: aiohttp.StreamReader, last: bytes) -> None:
    """The client's answer is complete: send the last event and the end of the body in one write, without waiting
    a loop turn for the backend's end of body. That end is still read before the relay returns, so the backend's
    load stays accounted and its connection is pooled only once its answer is really over."""
    await response.write_eof(last)
    try:
        while await upstream.readany():  # nothing should follow [DONE]; whatever does is dropped, not buffered
            pass
    except (aiohttp.ClientError, asyncio.TimeoutError):
        pass  # the client has every byte; Opened.close() drops a connection that did not end cleanly
