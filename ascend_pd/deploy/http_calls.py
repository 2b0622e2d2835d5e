"""Bounded HTTP calls from ascend-pd's own tools (`check`, the autoscaler) to engines and proxy replicas: each ends
within its timeout whatever the peer does (refuses, never answers, trickles, sends without end), and one that gets no
whole answer raises Unreachable with a short reason, never a library's exception.

The calls go straight to the address they name. An HTTP proxy in the environment (`http_proxy`, which Ascend hosts
often set to reach package mirrors) is not used: it would not reach the cluster's own addresses, and would be handed
the admin token."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_CHUNK = 1 << 16
# The most an answer may hold: a vLLM /metrics page of many engine cores is a few MB.
MAX_ANSWER_BYTES = 64 << 20


class Unreachable(Exception):
    """No whole HTTP answer: the connection was refused or reset, the time ran out, or the answer was too long. The
    message says which."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON; None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def text(self) -> str:
        return self.body.decode(errors="replace")


def call(url: str, timeout: float, *, method: str | None = None, body: Any = None, token: str | None = None,
         max_bytes: int = MAX_ANSWER_BYTES) -> Answer:
    """`method` (GET, or POST when there is a `body`) `url`, with `body` as JSON; `token` goes as 'Authorization:
    Bearer'. The whole answer, any status, within `timeout` seconds and `max_bytes`, or Unreachable."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    deadline = time.monotonic() + timeout
    # http.client and not urllib: urllib would send the call through the environment's HTTP proxy
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(method or ("POST" if data is not None else "GET"), path, body=data, headers=headers)
        _left(connection, deadline, timeout)
        response = connection.getresponse()
        chunks, size = [], 0
        while True:
            _left(connection, deadline, timeout)
            chunk = response.read1(_CHUNK)  # one read from the socket, so each is bounded by the time left
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise Unreachable(f"an answer longer than {max_bytes} bytes")
            chunks.append(chunk)
        return Answer(response.status, b"".join(chunks))
    except (TimeoutError, socket.timeout):
        raise Unreachable(f"no answer within {timeout:g} s") from None
    except ConnectionRefusedError:
        raise Unreachable("connection refused") from None
    except ssl.SSLError as exc:
        raise Unreachable(f"TLS failed ({exc.reason or type(exc).__name__})") from None
    except http.client.HTTPException as exc:
        raise Unreachable(f"not an HTTP answer ({type(exc).__name__})") from None
    except OSError as exc:
        raise Unreachable(exc.strerror or type(exc).__name__) from None
    finally:
        connection.close()


def _left(connection: http.client.HTTPConnection, deadline: float, timeout: float) -> None:
    """Give the next socket operation only the time left, so that a peer sending a byte at a time cannot stretch
    the call past its deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if connection.sock is not None:
        connection.sock.settimeout(min(left, timeout))
