"""The proxy's HTTP/1.1 server: an asyncio protocol around llhttp (httptools), one handler task per request.

What a proxy needs and no more: keep-alive, requests in order on a connection, bodies up to a limit, whole answers
with Content-Length and streamed ones with chunked encoding, back-pressure from slow clients, and a client that
disconnects cancelling its handler (which is what closes the backend calls it made)."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Awaitable, Callable

import httptools

log = logging.getLogger("ascend_pd.proxy.server")

KEEP_ALIVE_SECONDS = 75.0  # an idle client connection is closed after this (aiohttp's and nginx's default)
# a client that accepts no byte of its answer for this long is cut off, so it cannot hold a backend stream forever
WRITE_STALL_SECONDS = 120.0


class ClientGone(Exception):
    """The client closed its connection while its answer was being written."""


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    keep_alive: bool
    _connection: "_ServerConnection" = field(repr=False)
    refused: int | None = None  # a status sent without calling the handler (413: body over the limit)

    def stream(self, status: int = 200, headers: dict[str, str] | None = None) -> "Stream":
        """Start a chunked answer; its head goes out with the first write."""
        return Stream(self._connection, status, headers or {})


@dataclass
class Response:
    """A whole answer."""

    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"
    headers: dict[str, str] | None = None


Handler = Callable[[Request], Awaitable["Response | Stream"]]


def _status_line(status: int) -> str:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    return f"HTTP/1.1 {status} {reason}\r\n"


def _head(status: int, headers: dict[str, str], keep_alive: bool) -> list[str]:
    lines = [_status_line(status)]
    lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if not keep_alive:
        lines.append("Connection: close\r\n")
    return lines


class Stream:
    """A chunked answer being written; write() waits while the client's socket buffer is full."""

    def __init__(self, connection: "_ServerConnection", status: int, headers: dict[str, str]):
        self._connection = connection
        self._head: bytes | None = "".join(
            _head(status, headers, connection.keep_alive) + ["Transfer-Encoding: chunked\r\n\r\n"]).encode("latin-1")
        self.ended = False

    async def write(self, data: bytes) -> None:
        self.write_now(data)
        await self._connection.drain()

    async def end(self, last: bytes = b"") -> None:
        """The last data, if any, and the end of the body, in one write."""
        self.end_now(last)
        await self._connection.drain()

    def write_now(self, data: bytes) -> None:
        """Write without waiting for a slow client: for callers that follow back-pressure through on_pressure."""
        if data and not self.ended:
            self._send(b"%x\r\n%b\r\n" % (len(data), data))

    def end_now(self, last: bytes = b"") -> None:
        if not self.ended:
            self.ended = True
            self._send((b"%x\r\n%b\r\n" % (len(last), last) if last else b"") + b"0\r\n\r\n")

    def on_pressure(self, callback: Callable[[bool], None] | None) -> None:
        """`callback(True)` when the client's socket buffer fills, `callback(False)` when it has room again."""
        self._connection.pressure = callback
        if callback is not None and self._connection.paused:
            callback(True)

    def _send(self, data: bytes) -> None:
        if self._head is not None:
            data = self._head + data
            self._head = None
        self._connection.write(data)


class _ServerConnection(asyncio.Protocol):
    def __init__(self, server: "HttpServer", loop: asyncio.AbstractEventLoop):
        self._server = server
        self._loop = loop  # kept: asyncio.get_running_loop() costs a getpid() system call on every use
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._refused: int | None = None
        self._queue: list[Request] = []
        self._task: asyncio.Task | None = None
        self._drained: asyncio.Future | None = None
        self.paused = False
        self.pressure: Callable[[bool], None] | None = None
        self.keep_alive = True
        self.closed = False
        self._idle_timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self._server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse_now(400, "protocol upgrades are not supported")
        except httptools.HttpParserError:
            self._refuse_now(400, "malformed HTTP request")

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._server.connections.discard(self)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client left: its handler stops, and with it the backend calls it made
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ClientGone())

    def pause_writing(self) -> None:
        self.paused = True
        if self.pressure is not None:
            self.pressure(True)

    def resume_writing(self) -> None:
        self.paused = False
        if self.pressure is not None:
            self.pressure(False)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # llhttp callbacks
    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._refused = None
        self._arm_idle_timer()  # a request gets one keep-alive period to arrive whole

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._server.max_body:
            self._refused = 413
        elif self._headers.get("expect", "").lower() == "100-continue":
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for this on big bodies

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._server.max_body:
            self._refused = 413
        elif self._refused is None:
            self._body.append(body)

    def on_message_complete(self) -> None:
        path = self._url.split(b"?", 1)[0].decode("latin-1")
        request = Request(self._parser.get_method().decode("latin-1"), path, self._headers,
                          b"".join(self._body), self._parser.should_keep_alive(), self, self._refused)
        if self._idle_timer is not None:  # armed until a whole request is in: a half-sent one does not hold on
            self._idle_timer.cancel()
            self._idle_timer = None
        self._queue.append(request)
        if self._task is None:
            self._task = self._loop.create_task(self._serve_queue())

    # writing, used by Stream and answers
    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.closed:
            raise ClientGone()
        if self.paused:
            self._drained = self._loop.create_future()
            stalled = self._loop.call_later(self._server.write_stall, self._stalled)
            try:
                await self._drained
            finally:
                stalled.cancel()
                self._drained = None

    # serving
    async def _serve_queue(self) -> None:
        try:
            while self._queue and not self.closed:
                request = self._queue.pop(0)
                self.keep_alive = request.keep_alive and not self._server.closing
                if request.refused:
                    self.keep_alive = False
                    self._answer(Response(b'{"error": {"message": "request body too large", "code": 413}}', 413))
                else:
                    await self._serve(request)
                    self.pressure = None
                if not self.keep_alive:
                    self.transport.close()
                    return
            self._arm_idle_timer()
        finally:
            self._task = None

    async def _serve(self, request: Request) -> None:
        try:
            answer = await self._server.handler(request)
        except (ClientGone, asyncio.CancelledError):
            if not self.closed:
                raise
            return
        except Exception:
            log.exception("the handler of %s %s failed", request.method, request.path)
            answer = Response(b'{"error": {"message": "internal proxy error", "code": 500}}', 500)
        if isinstance(answer, Stream):
            if not answer.ended:  # a handler that returns an unfinished stream: end it rather than hang the client
                await answer.end()
            return
        self._answer(answer)

    def _answer(self, response: Response) -> None:
        headers = {"Content-Type": response.content_type, "Content-Length": str(len(response.body))}
        if response.headers:
            headers.update(response.headers)
        head = "".join(_head(response.status, headers, self.keep_alive) + ["\r\n"]).encode("latin-1")
        self.write(head + response.body)

    def _refuse_now(self, status: int, message: str) -> None:
        self.keep_alive = False
        self._answer(Response(b'{"error": {"message": "%b", "code": %d}}' % (message.encode(), status), status))
        self.transport.close()

    def _arm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if not self.closed:
            self._idle_timer = self._loop.call_later(self._server.keep_alive, self._idle_close)

    def _stalled(self) -> None:
        log.warning("a client read nothing of its answer for %.0f s; closing its connection", self._server.write_stall)
        self.transport.abort()  # connection_lost follows: the waiting write raises ClientGone, the handler stops

    def _idle_close(self) -> None:
        if self._task is None and not self.closed:
            self.transport.close()


class HttpServer:
    """Serves `handler` on a listening socket until close()."""

    def __init__(self, handler: Handler, max_body: int, keep_alive: float = KEEP_ALIVE_SECONDS,
                 write_stall: float = WRITE_STALL_SECONDS):
        self.handler = handler
        self.max_body = max_body
        self.keep_alive = keep_alive
        self.write_stall = write_stall
        self.connections: set[_ServerConnection] = set()
        self.closing = False
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int, reuse_port: bool = False) -> tuple[str, int]:
        """Listen; returns the bound (host, port). `reuse_port` lets sibling worker processes share the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self, loop), host, port, reuse_address=True,
                                                reuse_port=reuse_port or None, backlog=4096)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def start_on(self, sock: socket.socket) -> None:
        """Listen on a socket made (and bound) elsewhere: a worker's private port, made before the fork."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self, loop), sock=sock)

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting; give requests in flight `grace` seconds, then close every connection."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        busy = [c for c in self.connections if c._task is not None]
        for connection in list(self.connections):
            if connection._task is None:
                connection.transport.close()
        if busy:
            await asyncio.wait([asyncio.ensure_future(_ended(c)) for c in busy], timeout=grace)
        for connection in list(self.connections):
            connection.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()


async def _ended(connection: _ServerConnection) -> None:
    while connection._task is not None and not connection.closed:
        await asyncio.sleep(0.01)
