"""A threaded HTTP server on a loopback address for tests of HTTP clients: it records what it is asked and answers
with a function of the request, over plain HTTP or TLS."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

import trustme


class Server:
    """`answer(handler)` answers each request; `requests` holds (method, path or proxied URL, Authorization)."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None], tls: trustme.LeafCert | None = None,
                 host: str = "127.0.0.1", port: int = 0):
        self.requests: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                server.requests.append((self.command, self.path, self.headers.get("Authorization")))
                answer(self)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer((host, port), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.configure_cert(context)
            self.http.socket = context.wrap_socket(self.http.socket, server_side=True)
        # a short poll: shutdown() waits for the serving loop's next look, half a second by default
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"{'https' if tls else 'http'}://{host}:{self.http.server_port}"

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
