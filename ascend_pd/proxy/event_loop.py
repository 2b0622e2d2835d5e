"""The event loop the proxy runs on: uvloop when it is importable (8-12% less proxy CPU per streamed request in
paired runs of tools/bench_proxy.py), else asyncio's own. Both run the same code; uvloop is optional."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Literal, TypeVar

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOPS: tuple[EventLoopChoice, ...] = ("auto", "uvloop", "asyncio")
T = TypeVar("T")


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(choice: EventLoopChoice) -> str:
    """'uvloop' or 'asyncio': what `choice` means on this install. Asking for uvloop without it is an error."""
    if choice == "asyncio":
        return "asyncio"
    if uvloop_available():
        return "uvloop"
    if choice == "uvloop":
        raise RuntimeError("uvloop is not installed (pip install uvloop, or use the asyncio event loop)")
    return "asyncio"


def new_event_loop(choice: EventLoopChoice = "auto") -> tuple[asyncio.AbstractEventLoop, str]:
    """A fresh event loop of the chosen kind, and the name of the kind it is."""
    name = resolve(choice)
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop(), name
    return asyncio.new_event_loop(), name


def run(coroutine: Coroutine[Any, Any, T], choice: EventLoopChoice = "auto") -> T:
    """asyncio.run on an event loop of the chosen kind (asyncio.Runner's loop_factory needs Python 3.11)."""
    loop, _ = new_event_loop(choice)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coroutine)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
