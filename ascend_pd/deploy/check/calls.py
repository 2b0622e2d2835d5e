"""Bounded HTTP calls: each ends within its timeout whatever the peer does (refuses, never answers, trickles), and
one that gets no answer raises Unreachable with a short reason, never a library's exception."""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

_CHUNK = 1 << 16


class Unreachable(Exception):
    """No whole HTTP answer: the connection was refused or reset, or the time ran out. The message says which."""


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


def call(url: str, timeout: float, *, body: dict | None = None, token: str | None = None) -> Answer:
    """GET `url`, or POST `body` as JSON; `token` goes as 'Authorization: Bearer'. The whole answer, any status,
    within `timeout` seconds, or Unreachable."""
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    deadline = time.monotonic() + timeout
    # http.client and not urllib: urllib would send the call through an HTTP proxy named in the environment
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("POST" if data is not None else "GET", path, body=data, headers=headers)
        _left(connection, deadline, timeout)
        response = connection.getresponse()
        chunks = []
        while True:
            _left(connection, deadline, timeout)
            chunk = response.read1(_CHUNK)  # one read from the socket, so each is bounded by the time left
            if not chunk:
                break
            chunks.append(chunk)
        return Answer(response.status, b"".join(chunks))
    except (TimeoutError, socket.timeout):
        raise Unreachable(f"no answer within {timeout:g} s") from None
    except ConnectionRefusedError:
        raise Unreachable("connection refused") from None
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
