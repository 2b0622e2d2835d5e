"""Calls to backends over the proxy's pooled HTTP client, turning every transport problem into UpstreamFailure."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

import msgspec

from ascend_pd.proxy.backends import Backend, Lease
from ascend_pd.proxy.failures import UpstreamFailure
from ascend_pd.proxy.settings import BackendTimeouts
from ascend_pd.proxy.wire.client import CallTimeouts, ConnectionFailed, HttpClient, Response, Target

ERROR_BODY_LIMIT = 64 * 1024
STREAMED_ERROR = b'data: {"error"'
# what a failed call raises: the backend unreachable or broken, or a connect/read/total timeout
TRANSPORT_ERRORS = (ConnectionFailed, OSError, asyncio.TimeoutError)


def make_client(timeouts: BackendTimeouts) -> HttpClient:
    return HttpClient(CallTimeouts(connect=timeouts.connect, read=timeouts.read, total=timeouts.total))


@functools.lru_cache(maxsize=4096)
def target(url: str, path: str) -> Target:
    """A backend URL and path parsed once, not per call."""
    return Target.parse(url + path)


@dataclass
class Opened:
    """A backend answer that has started well: status 200 and a first chunk (the whole body when not streaming).
    The leases are released and the connection closed or returned when the relay is done with it. With no
    response, `first` is a whole answer already read (P's, when P had all of it). With a response, the first
    lease is that of the backend answering."""

    response: Response | None
    first: bytes
    streaming: bool
    leases: list[Lease]

    @property
    def answering(self) -> Backend:
        return self.leases[0].backend

    def close(self) -> None:
        """Release the leases; return a fully read connection to the pool, close (abort) any other."""
        for lease in self.leases:
            lease.release()
        if self.response is None:
            return
        self.response.release()  # a body not read to its end closes the connection: vLLM aborts that request


async def post_json(client: HttpClient, backend: Backend, path: str, body: dict[str, Any],
                    headers: dict[str, str]) -> dict[str, Any]:
    """A non-streaming call; the parsed JSON answer or UpstreamFailure. Feeds the backend's circuit breaker."""
    response = None
    try:
        response = await client.request("POST", target(backend.url, path), msgspec.json.encode(body), headers)
        payload = await response.read()
    except TRANSPORT_ERRORS as exc:
        raise _transport_failure(backend, exc) from None
    finally:
        if response is not None:
            response.release()  # pools the connection once the body is read; a cancelled read closes it
    if response.status != 200:
        raise _status_failure(backend, response.status, payload)
    try:
        answer = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        raise _fault(backend, "answered 200 with a body that is not JSON") from None
    if not isinstance(answer, dict):
        raise _fault(backend, "answered 200 with JSON that is not an object")
    backend.breaker.record_success()
    return answer


async def open_answer(client: HttpClient, backend: Backend, path: str, body: dict[str, Any],
                      headers: dict[str, str], streaming: bool, handoff: bool = False) -> tuple[Response, bytes]:
    """Send a request and wait until it has surely started: a 200 and a non-empty first chunk. With `handoff`
    (D given a prefill's KV), an error status does not count against D's breaker: a KV load failed under
    kv_load_failure_policy "fail" is a 500 whose cause may be P or the link."""
    response = None
    try:
        response = await client.request("POST", target(backend.url, path), msgspec.json.encode(body), headers)
        if response.status != 200:
            body = await response.read(ERROR_BODY_LIMIT)
            if handoff:
                raise UpstreamFailure(backend.url, f"HTTP {response.status}", status=response.status, body=body)
            raise _status_failure(backend, response.status, body)
        first = await (response.read_any() if streaming else response.read())
        if not first:
            raise _fault(backend, "answered 200 and then closed without a byte")
        if streaming and first.lstrip().startswith(STREAMED_ERROR):
            # vLLM streams a request that failed before its first token (a KV load that failed under
            # kv_load_failure_policy "fail") as a 200 whose first event is an error: nothing reached the client yet
            raise UpstreamFailure(backend.url, "failed before its first token", status=500, body=first)
    except TRANSPORT_ERRORS as exc:
        if response is not None:
            response.close()
        raise _transport_failure(backend, exc) from None
    except BaseException:  # failures above and cancellation: never leave the connection open
        if response is not None:
            response.close()
        raise
    backend.breaker.record_success()
    return response, first


def _status_failure(backend: Backend, status: int, body: bytes) -> UpstreamFailure:
    failure = UpstreamFailure(backend.url, f"HTTP {status}", status=status, body=body)
    if failure.is_backend_fault:
        backend.breaker.record_failure()
    return failure


def _fault(backend: Backend, message: str) -> UpstreamFailure:
    backend.breaker.record_failure()
    return UpstreamFailure(backend.url, message)


def _transport_failure(backend: Backend, exc: BaseException) -> UpstreamFailure:
    backend.breaker.record_failure()
    timed_out = isinstance(exc, asyncio.TimeoutError)
    message = "timed out" if timed_out else f"{type(exc).__name__}: {exc}"
    return UpstreamFailure(backend.url, message, timed_out=timed_out)
