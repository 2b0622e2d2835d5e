"""Races between two threads of the test process."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

RACE_SWITCH_INTERVAL_S = 0.002


@contextmanager
def fine_thread_switching() -> Iterator[None]:
    """A thread back from a system call waits for a busy thread to hand over the GIL, up to the switch interval
    (5 ms by default) each time, so a writer racing a reader that keeps the GIL busy spent most of its time waiting
    between the system calls of its writes (seconds per test, 26 s for one). A shorter interval keeps the reader
    reading between the writer's steps, and lets the writer get on."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(RACE_SWITCH_INTERVAL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
