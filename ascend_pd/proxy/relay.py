"""Sending a started backend answer to the client: bytes pass through untouched (SSE events are never parsed); a
stream that breaks after the first byte ends with an SSE error event, never as a silently truncated 200."""

from __future__ import annotations

from ascend_pd.proxy.failures import sse_error_event
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.upstream import TRANSPORT_ERRORS, Opened
from ascend_pd.proxy.wire.server import Request, Response, Stream
from ascend_pd.proxy.workload_window import EventCounter

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE_MARK = b"[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"  # the last event of an OpenAI stream: nothing may follow it
TAIL = len(DONE_EVENT)


async def relay(request: Request, opened: Opened, metrics: ProxyMetrics,
                events: EventCounter | None = None) -> Response | Stream:
    """`events`, when given, counts the stream's events as they pass (the workload window's output tokens)."""
    events = events or EventCounter()
    try:
        if not opened.streaming:
            return Response(opened.first)
        stream = request.stream(200, SSE_HEADERS)
        if opened.response is None:  # the whole stream is already here
            await stream.end(events.feed(opened.first))
        else:
            await _relay_stream(stream, opened, metrics, events)
        return stream
    finally:
        opened.close()


async def _relay_stream(stream: Stream, opened: Opened, metrics: ProxyMetrics, events: EventCounter) -> None:
    """Each backend chunk goes to the client from inside the backend connection's callback (Response.pipe), so a
    token costs one read and one write. The last event and the end of the body go out in one write as soon as
    [DONE] is seen; the backend's own end of body is still awaited before returning, so its load stays accounted
    and its connection is pooled only once its answer is really over."""
    upstream = opened.response
    heard = opened.answering.breaker.record_heard  # a stream that flows tells the health checks its backend lives
    tail = b""

    def forward(chunk: bytes) -> None:
        nonlocal tail
        heard()
        chunk = events.feed(chunk)
        if stream.ended:  # nothing may follow [DONE]: whatever does is dropped
            return
        tail = chunk[-TAIL:] if len(chunk) >= TAIL else (tail + chunk)[-TAIL:]
        if tail.endswith(DONE_EVENT):
            stream.end_now(chunk)
        else:
            stream.write_now(chunk)

    forward(opened.first)
    stream.on_pressure(upstream.hold)
    try:
        await upstream.pipe(forward)
    except TRANSPORT_ERRORS as exc:  # from the backend: a client that leaves cancels this task instead
        broken = f"the backend stream broke: {type(exc).__name__} {exc}".strip()
    else:
        broken = None if DONE_MARK in tail else "the backend ended the stream before [DONE]"
    finally:
        stream.on_pressure(None)  # the backend connection may go back to the pool: the client no longer steers it
    if stream.ended:
        return
    if broken:
        metrics.stream_errors.inc()
        stream.write_now(sse_error_event(broken))
    await stream.end()
