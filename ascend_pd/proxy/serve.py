"""Run a proxy until it is stopped: on the chosen event loop, with a failure to bind reported as bad input."""

from __future__ import annotations

import errno
from typing import Callable

from ascend_pd.errors import InputError
from ascend_pd.proxy.app import Proxy, build_app
from ascend_pd.proxy.event_loop import EventLoopChoice, new_event_loop
from ascend_pd.proxy.memory_trace import install_from_environment


def serve(proxy: Proxy, host: str, port: int, event_loop: EventLoopChoice = "auto",
          started: Callable[[str], None] = lambda loop_name: None) -> None:
    """Serve `proxy` on host:port; `started` hears the event loop's name once the loop exists."""
    from aiohttp import web

    try:
        loop, loop_name = new_event_loop(event_loop)
    except RuntimeError as exc:
        raise InputError(str(exc), field="--event-loop", fix="pip install uvloop, or pass --event-loop asyncio") \
            from None
    install_from_environment(loop)
    started(loop_name)
    try:
        web.run_app(build_app(proxy), host=host, port=port, handler_cancellation=True, access_log=None,
                    print=None, loop=loop)
    except OSError as exc:  # raised while binding, before any request is served
        raise listen_error(host, port, exc) from None


def listen_error(host: str, port: int, exc: OSError) -> InputError:
    """A bind failure as the flag to change: the port in use, or an address this machine does not have."""
    if exc.errno == errno.EADDRINUSE:
        return InputError(f"port {port} is already in use on {host}", field="--port",
                          fix=f"stop the process listening there (ss -ltnp 'sport = :{port}'), or pass another --port")
    return InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--host",
                      fix="pass an address of this machine, or 0.0.0.0 for all of them")
