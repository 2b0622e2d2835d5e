"""HTTP/1.1 calls to backends on pooled keep-alive connections: an asyncio protocol around llhttp (httptools).

The proxy's hot path is two or three calls per request and one relayed chunk per token. aiohttp's client spends
most of a request's CPU on machinery a proxy does not use (tracing, cookies, redirects, a timer object per read);
here a call is one write of head and body, and each body chunk is one callback into a buffer. Every wait is bounded:
connect, the longest silence between two reads, and the whole call."""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

import httptools

# uvicorn (vLLM's server) closes a keep-alive connection after 5 s of silence; one idle a little less is reused,
# an older one is closed rather than raced against the server's close
IDLE_REUSE_SECONDS = 4.0
PAUSE_READING_BYTES = 1 << 20  # a client slower than its backend: stop reading the backend past this much


class ConnectionFailed(ConnectionError):
    """The backend could not be reached, or its connection broke or spoke something other than HTTP/1.1."""


class ReadTimeout(asyncio.TimeoutError):
    """Connect, read (silence) or total timeout of a call."""


@dataclass(frozen=True)
class Target:
    """Where a call goes, parsed once: host, port, and the request line's path."""

    host: str
    port: int
    path: str
    host_header: str

    @classmethod
    def parse(cls, url: str) -> "Target":
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http://host:port URLs are supported, not {url!r}")
        port = parts.port or 80
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        return cls(parts.hostname, port, path, parts.netloc)


@dataclass(frozen=True)
class CallTimeouts:
    """What one call waits, in seconds: to connect, between two reads, in all."""

    connect: float
    read: float
    total: float


class Response:
    """A backend's answer: status at once, body as it arrives. Read with read_any()/read(); finish with release()
    (a fully read answer returns its connection to the pool) or close() (drops the connection, which is what tells
    vLLM to abort the request)."""

    def __init__(self, connection: "_Connection", timeouts: CallTimeouts):
        self._connection = connection
        self._loop = connection.loop
        self._read_timeout = timeouts.read
        self._deadline = time.monotonic() + timeouts.total
        self.status = 0
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._complete = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._done = False
        self._sink: Callable[[bytes], None] | None = None  # set by pipe()
        self._piped: asyncio.Future | None = None
        self._last_byte = 0.0
        self._watchdog: asyncio.TimerHandle | None = None

    # --- reading

    async def read_any(self) -> bytes:
        """Everything buffered now (waiting for at least one byte), or b"" at the end of the body."""
        if not self._chunks and not self._complete:
            await self._wait()
        if not self._chunks:
            return b""
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        self._connection.resume_reading()
        return data

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body, or its first `limit` bytes (what an error answer is allowed to cost)."""
        parts = []
        size = 0
        while limit is None or size < limit:
            data = await self.read_any()
            if not data:
                break
            parts.append(data)
            size += len(data)
        body = b"".join(parts)
        return body if limit is None else body[:limit]

    def at_eof(self) -> bool:
        return self._complete and not self._chunks

    def pipe(self, sink: Callable[[bytes], None]) -> asyncio.Future:
        """From now on hand each body chunk to `sink` as it arrives, inside the connection's callback: no task
        switch, future or timer per chunk, which is most of what relaying a token costs. The future ends with the
        body (or fails as read_any() would); silence and the total time stay bounded by one watchdog timer."""
        loop = self._loop
        self._sink = sink
        self._piped = loop.create_future()
        if self._chunks:
            sink(b"".join(self._chunks))
            self._chunks.clear()
            self._buffered = 0
            self._connection.resume_reading()
        if self._error is not None:
            self._piped.set_exception(self._error)
        elif self._complete:
            self._piped.set_result(None)
        else:
            self._last_byte = loop.time()
            self._watchdog = loop.call_later(self._read_timeout, self._watch)
        return self._piped

    def hold(self, held: bool) -> None:
        """Stop (True) or resume (False) reading the backend: back-pressure from a slow client during pipe()."""
        if held:
            self._connection.pause_reading()
        else:
            self._connection.resume_reading()

    def _watch(self) -> None:
        loop = self._loop
        now = loop.time()
        if now - self._last_byte >= self._read_timeout:
            self._fail(ReadTimeout(f"timed out: {self._read_timeout:g} s without a byte"))
        elif time.monotonic() >= self._deadline:
            self._fail(ReadTimeout("timed out: the call's total time"))
        else:
            due = min(self._last_byte + self._read_timeout, now + self._deadline - time.monotonic())
            self._watchdog = loop.call_at(due, self._watch)

    # --- finishing

    def release(self) -> None:
        """Done with this answer: pool the connection if the body was read to its end, else drop it."""
        if self._done:
            return
        self._done = True
        if self.at_eof():
            self._connection.finished(self)
        else:
            self._connection.close()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._connection.close()
        if self._piped is not None and not self._piped.done():
            self._piped.cancel()  # the relay is gone: nobody is left to hear how the body ends
        self._unpipe(None)

    # --- fed by the connection

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        loop = self._loop
        self._waiter = loop.create_future()
        timeout = min(self._read_timeout, self._deadline - time.monotonic())
        timer = loop.call_later(max(timeout, 0.0), self._timed_out, self._waiter, timeout < self._read_timeout)
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _timed_out(self, waiter: asyncio.Future, total: bool) -> None:
        if not waiter.done():
            what = "the call's total time" if total else f"{self._read_timeout:g} s without a byte"
            waiter.set_exception(ReadTimeout(f"timed out: {what}"))

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _feed(self, data: bytes) -> None:
        if self._sink is not None:
            self._last_byte = self._loop.time()
            self._sink(data)
            return
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > PAUSE_READING_BYTES:
            self._connection.pause_reading()
        self._wake()

    def _end(self) -> None:
        self._complete = True
        self._wake()
        self._unpipe(None)

    def _fail(self, error: BaseException) -> None:
        if self._complete:
            return
        self._error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        self._unpipe(error)

    def _unpipe(self, error: BaseException | None) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._piped is not None and not self._piped.done():
            if error is None:
                self._piped.set_result(None)
            else:
                self._piped.set_exception(error)


class _Connection(asyncio.Protocol):
    """One keep-alive TCP connection to a backend, carrying one call at a time."""

    def __init__(self, pool: "HttpClient", key: tuple[str, int], loop: asyncio.AbstractEventLoop):
        self._pool = pool
        self.loop = loop
        self.key = key
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._response: Response | None = None
        self._head: asyncio.Future | None = None
        self.closed = False
        self._paused = False
        self._reusable = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._broken(ConnectionFailed(f"not an HTTP/1.1 answer: {exc}"))

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._broken(ConnectionFailed(f"connection closed: {exc}" if exc else "the backend closed the connection"))

    # llhttp callbacks
    def on_headers_complete(self) -> None:
        response = self._response
        if response is not None:
            response.status = self._parser.get_status_code()
            if self._head is not None and not self._head.done():
                self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self._response is not None:
            self._response._feed(body)

    def on_message_complete(self) -> None:
        self._reusable = self._parser.should_keep_alive()  # llhttp forgets it once the message is over
        if self._response is not None:
            self._response._end()

    # used by HttpClient and Response
    def send(self, response: Response, head: bytes, body: bytes) -> asyncio.Future:
        self._response = response
        self._head = self.loop.create_future()
        self.transport.write(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            self.transport.write(body)
        return self._head

    def finished(self, response: Response) -> None:
        if response is self._response and self._reusable and not self.closed:
            self._response = None
            self._head = None
            self._reusable = False
            self._pool.put_back(self)
        else:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.transport.abort()

    def pause_reading(self) -> None:
        if not self._paused and not self.closed:
            self._paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused and not self.closed:
            self._paused = False
            self.transport.resume_reading()

    def _broken(self, error: BaseException) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
        if self._response is not None:
            self._response._fail(error)
        if not self.closed:
            self.close()


class HttpClient:
    """Keep-alive connections per backend host and port; no limit on their number (the proxy's admission control
    bounds the calls in flight)."""

    def __init__(self, timeouts: CallTimeouts):
        self.timeouts = timeouts
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def request(self, method: str, target: Target, body: bytes = b"", headers: dict[str, str] | None = None,
                      timeouts: CallTimeouts | None = None) -> Response:
        """Send a call and wait for the answer's status line and headers."""
        timeouts = timeouts or self.timeouts
        connection = await self._connection(target, timeouts.connect)
        response = Response(connection, timeouts)
        head = [f"{method} {target.path} HTTP/1.1\r\nHost: {target.host_header}\r\nContent-Length: {len(body)}\r\n"]
        for name, value in (headers or {}).items():
            head.append(f"{name}: {value}\r\n")
        head.append("\r\n")
        try:
            started = connection.send(response, "".join(head).encode("latin-1"), body)
            await _bounded(connection.loop, started, min(timeouts.read, timeouts.total), "no answer")
        except BaseException:
            response.close()
            raise
        return response

    def put_back(self, connection: _Connection) -> None:
        if self._closed:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.key, []).append(connection)

    async def close(self) -> None:
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    async def _connection(self, target: Target, connect_timeout: float) -> _Connection:
        key = (target.host, target.port)
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: warmest, and furthest from the server's idle close
            if not connection.closed and now - connection.idle_since < IDLE_REUSE_SECONDS:
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self, key, loop), target.host, target.port),
                connect_timeout)
        except asyncio.TimeoutError:
            raise ReadTimeout(f"timed out: no connection to {target.host}:{target.port} within "
                              f"{connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectionFailed(f"cannot connect to {target.host}:{target.port}: {exc.strerror or exc}") from None
        return connection


async def _bounded(loop: asyncio.AbstractEventLoop, future: asyncio.Future, seconds: float, what: str) -> None:
    def expire() -> None:
        if not future.done():
            future.set_exception(ReadTimeout(f"timed out: {what} within {seconds:g} s"))

    timer = loop.call_later(seconds, expire)
    try:
        await future
    finally:
        timer.cancel()
