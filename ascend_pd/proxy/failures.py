"""What can go wrong with a request, and how each failure reaches the client as a proper HTTP error."""

from __future__ import annotations

import msgspec

from ascend_pd.proxy.wire.server import Response


class UpstreamFailure(Exception):
    """A backend gave no usable answer: a transport error or timeout (status None), or an error status."""

    def __init__(self, backend: str, message: str, status: int | None = None, body: bytes = b"",
                 timed_out: bool = False):
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.status = status
        self.body = body
        self.timed_out = timed_out

    @property
    def is_backend_fault(self) -> bool:
        """True when another backend may succeed; False when the request itself was refused (a 4xx)."""
        return self.status is None or self.status >= 500 or self.status in (408, 429)


class ClientError(Exception):
    """An answer for the client: an HTTP status with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str, retry_after: int | None = None,
                 body: bytes | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.retry_after = retry_after
        self.body = body  # a backend's own error body, passed through verbatim

    def response(self) -> Response:
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None
        body = self.body or error_json(self.message, self.kind, self.status)
        return Response(body, self.status, headers=headers)


def error_json(message: str, kind: str, code: int) -> bytes:
    return msgspec.json.encode({"error": {"message": message, "type": kind, "code": code}})


def sse_error_event(message: str, kind: str = "upstream_error", code: int = 502) -> bytes:
    """How a failure is told once the 200 and part of the stream are already sent."""
    return b"data: " + error_json(message, kind, code) + b"\n\n"


def no_backend(role: str, retry_after: int) -> ClientError:
    return ClientError(503, f"no healthy {role} backend", "service_unavailable", retry_after=retry_after)


def from_upstream(failure: UpstreamFailure) -> ClientError:
    """A request refused by a backend keeps that backend's status and body; a backend fault is a 502 or 504."""
    if not failure.is_backend_fault:
        return ClientError(failure.status or 400, str(failure), "invalid_request_error", body=failure.body or None)
    if failure.timed_out:
        return ClientError(504, f"backend timed out: {failure}", "upstream_timeout")
    return ClientError(502, f"backend failed: {failure}", "upstream_error")
