"""The proxy's HTTP/1.1 server: an asyncio protocol around llhttp (httptools), one handler task per request.

What a proxy needs and no more: keep-alive, requests in order on a connection, whole answers with Content-Length and
streamed ones with chunked encoding, back-pressure from slow clients, and a client that disconnects cancelling its
handler (which is what closes the backend calls it made).

It faces any client on the network, so everything a client can make it hold is bounded (ServerLimits): connections,
requests queued on one connection, header and body bytes, body bytes held across connections, and the time a request
may take to arrive. A request over a limit, or bytes that are not HTTP, get an error answer in their turn and the
connection closes."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Awaitable, Callable

import httptools
import msgspec

log = logging.getLogger("ascend_pd.proxy.server")


@dataclass(frozen=True)
class ServerLimits:
    """What one client (or all of them) can make one server process hold. Sized for real serving: thousands of
    connections, prompts of tens of MB."""

    max_connections: int = 10_000  # open client connections; one more is answered 503 and closed
    max_pipelined: int = 32  # requests read ahead on one connection; reading pauses while that many wait
    max_header_bytes: int = 64 * 1024  # request line and headers; more is a 431
    max_body_bytes: int = 64 * 1024 * 1024  # one body (long prompts with inline images fit); more is a 413
    max_buffered_bytes: int = 1024 * 1024 * 1024  # bodies held across connections; a body past it is a 503
    read_timeout: float = 60.0  # a request must arrive whole this long after its first byte, or the connection closes
    keep_alive: float = 75.0  # an idle client connection is closed after this (aiohttp's and nginx's default)
    # a client that accepts no byte of its answer for this long is cut off, so it cannot hold a backend stream forever
    write_stall: float = 120.0


class _Refused(Exception):
    """Raised in a parser callback: the request in progress is answered `status` in its turn, and reading stops."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


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
    refused: _Refused | None = None  # answered without calling the handler, then the connection closes

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
        self._limits = server.limits
        self._loop = loop  # kept: asyncio.get_running_loop() costs a getpid() system call on every use
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_bytes = 0  # of the request line's URL and the headers llhttp has handed over whole
        # llhttp holds a header name or value until its line ends: the raw bytes of a head still arriving are counted
        # too, so a header line that never ends is cut off at the limit rather than held
        self._in_head = False
        self._raw_head_bytes = 0
        self._head_share_unknown = False  # the head began after another request in the chunk: that chunk not counted
        self._completed_in_chunk = False
        self._body_limit = self._limits.max_body_bytes
        self._body: list[bytes] = []
        self._body_size = 0
        self._queue: list[Request] = []
        self._task: asyncio.Task | None = None
        self._drained: asyncio.Future | None = None
        self.paused = False
        self.pressure: Callable[[bool], None] | None = None
        self.keep_alive = True
        self.closed = False
        self._reading = True  # False while the pipelined queue is full
        self._stopped = False  # a request was refused: nothing more is read from this client
        self._in_message = False
        self._held = 0  # body bytes of this connection counted in the server's buffered total
        self._idle_timer: asyncio.TimerHandle | None = None
        self._read_timer: asyncio.TimerHandle | None = None

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        if len(self._server.connections) >= self._limits.max_connections:
            self.closed = True
            transport.write(_refusal(503, "the proxy is at its limit of open connections"))
            transport.close()
            return
        self._server.connections.add(self)
        self._idle_timer = self._loop.call_later(self._limits.keep_alive, self._idle_close)

    def data_received(self, data: bytes) -> None:
        if self._stopped:
            return
        self._completed_in_chunk = False
        try:
            self._parser.feed_data(data)
            if self._in_head:
                self._count_raw_head_bytes(len(data))
        except httptools.HttpParserUpgrade:
            self._refuse(_Refused(400, "protocol upgrades are not supported"))
        except httptools.HttpParserCallbackError as exc:
            refused = exc.__context__
            if not isinstance(refused, _Refused):
                log.error("reading a request failed", exc_info=refused)
                refused = _Refused(400, "malformed HTTP request")
            self._refuse(refused)
        except httptools.HttpParserError:
            self._refuse(_Refused(400, "malformed HTTP request"))

    def _count_raw_head_bytes(self, size: int) -> None:
        """A chunk read while a head is unfinished: all of it is head, unless the head began after another request
        in this chunk (then only the callbacks count that part; the next chunks are head whole)."""
        if self._head_share_unknown:
            self._head_share_unknown = False
        else:
            self._raw_head_bytes += size
        if self._raw_head_bytes > self._limits.max_header_bytes:
            self._refuse(_Refused(431, f"request headers over {self._limits.max_header_bytes} bytes"))

    def connection_lost(self, exc) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._read_timer is not None:
            self._read_timer.cancel()
        if self.closed:  # refused at connect: never counted
            return
        self.closed = True
        self._server.connections.discard(self)
        self._server.buffered -= self._held
        self._held = 0
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
        self._header_bytes = 0
        self._in_head = True
        self._raw_head_bytes = 0
        self._head_share_unknown = self._completed_in_chunk
        self._body = []
        self._body_size = 0
        self._in_message = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        # a request gets one read period to arrive whole, whatever runs before it on this connection
        self._read_timer = self._loop.call_later(self._limits.read_timeout, self._read_timed_out)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)  # with ": " and CRLF, so empty headers count too
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def _count_header_bytes(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self._limits.max_header_bytes:
            raise _Refused(431, f"request headers over {self._limits.max_header_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._body_limit = self._server.body_limit(self._url.split(b"?", 1)[0].decode("latin-1"))
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._body_limit:
            raise _Refused(413, f"request body over {self._body_limit} bytes")
        if self._headers.get("expect", "").lower() == "100-continue" and self._task is None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits a second for this on big bodies

    def on_body(self, body: bytes) -> None:
        size = len(body)
        self._body_size += size
        if self._body_size > self._body_limit:  # a chunked body has no length to check up front
            raise _Refused(413, f"request body over {self._body_limit} bytes")
        if self._server.buffered + size > self._limits.max_buffered_bytes:
            raise _Refused(503, "the proxy holds too many request bodies; retry shortly")
        self._server.buffered += size
        self._held += size
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        self._completed_in_chunk = True
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        if len(self._queue) >= self._limits.max_pipelined:  # sent in one burst, past the pause below
            raise _Refused(503, f"more than {self._limits.max_pipelined} pipelined requests")
        path = self._url.split(b"?", 1)[0].decode("latin-1")
        self._enqueue(Request(self._parser.get_method().decode("latin-1"), path, self._headers,
                              b"".join(self._body), self._parser.should_keep_alive(), self))
        if len(self._queue) >= self._limits.max_pipelined:
            self._pause_reading()

    def _pause_reading(self) -> None:
        """Stop reading this client. The read timeout of a request it was sending waits too: its slowness is ours."""
        if self._reading:
            self._reading = False
            self.transport.pause_reading()
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _resume_reading(self) -> None:
        self._reading = True
        self.transport.resume_reading()
        if self._in_message:
            self._read_timer = self._loop.call_later(self._limits.read_timeout, self._read_timed_out)

    def _enqueue(self, request: Request) -> None:
        self._queue.append(request)
        if self._task is None:
            self._task = self._loop.create_task(self._serve_queue())

    def _refuse(self, refused: _Refused) -> None:
        """Answer the request in progress with `refused` after those before it, then close; read no more."""
        self._stopped = True
        self._in_message = False
        self._in_head = False
        self._pause_reading()
        self._enqueue(Request("", "", {}, b"", False, self, refused))

    # writing, used by Stream and answers
    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    async def drain(self) -> None:
        if self.closed:
            raise ClientGone()
        if self.paused:
            self._drained = self._loop.create_future()
            stalled = self._loop.call_later(self._limits.write_stall, self._stalled)
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
                if not self._reading and not self._stopped:
                    self._resume_reading()
                self.keep_alive = request.keep_alive and not self._server.closing
                if request.refused is not None:
                    self.write(_refusal(request.refused.status, request.refused.message))
                    self.transport.close()
                    return
                try:
                    await self._serve(request)
                finally:
                    self._release(len(request.body))
                self.pressure = None
                if not self.keep_alive:
                    self.transport.close()
                    return
            if not self.closed and not self._in_message:
                self._idle_timer = self._loop.call_later(self._limits.keep_alive, self._idle_close)
        finally:
            self._task = None

    def _release(self, size: int) -> None:
        if not self.closed:
            self._held -= size
            self._server.buffered -= size

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

    def _stalled(self) -> None:
        log.warning("a client read nothing of its answer for %.0f s; closing its connection", self._limits.write_stall)
        self.transport.abort()  # connection_lost follows: the waiting write raises ClientGone, the handler stops

    def _idle_close(self) -> None:
        if self._task is None and not self.closed:
            self.transport.close()

    def _read_timed_out(self) -> None:
        """A request still arriving after the read timeout: a slow or stuck client, closed even while a request
        before it is served (its handler stops too)."""
        self._read_timer = None
        if not self.closed:
            self.transport.abort()


def _refusal(status: int, message: str) -> bytes:
    """A whole error answer that closes the connection."""
    kind = "service_unavailable" if status == 503 else "invalid_request_error"
    body = msgspec.json.encode({"error": {"message": message, "type": kind, "code": status}})
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return "".join(_head(status, headers, keep_alive=False) + ["\r\n"]).encode("latin-1") + body


class HttpServer:
    """Serves `handler` on a listening socket until close()."""

    def __init__(self, handler: Handler, limits: ServerLimits = ServerLimits(), tls: ssl.SSLContext | None = None,
                 body_limits: dict[str, int] | None = None):
        """`body_limits`: paths whose bodies must be smaller than limits.max_body_bytes, with their limit; a larger
        one is refused from its Content-Length, before it is read."""
        self.handler = handler
        self.limits = limits
        self.tls = tls  # serve HTTPS with it
        self.body_limits = body_limits or {}
        self.connections: set[_ServerConnection] = set()
        self.buffered = 0  # request body bytes held by every connection
        self.closing = False
        self._server: asyncio.AbstractServer | None = None

    def body_limit(self, path: str) -> int:
        return min(self.body_limits.get(path, self.limits.max_body_bytes), self.limits.max_body_bytes)

    async def start(self, host: str, port: int, reuse_port: bool = False) -> tuple[str, int]:
        """Listen; returns the bound (host, port). `reuse_port` lets sibling worker processes share the port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self, loop), host, port, reuse_address=True,
                                                reuse_port=reuse_port or None, backlog=4096, **self._tls_options())
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def start_on(self, sock: socket.socket) -> None:
        """Listen on a socket made (and bound) elsewhere: a worker's private port, made before the fork."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self, loop), sock=sock,
                                                **self._tls_options())

    def _tls_options(self) -> dict:
        """A connection counts against max_connections once its TLS handshake is done (the event loop tells the
        protocol no sooner); until then the handshake is bounded in time, by the read timeout, like a request."""
        return {"ssl": self.tls, "ssl_handshake_timeout": self.limits.read_timeout} if self.tls else {}

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
