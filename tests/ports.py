"""Ports for the servers a test starts. A port the kernel handed to a probe socket (bind to 0) comes from the
ephemeral range, the same range every outgoing connection draws its local port from, so between the probe and the
server's own bind a client socket can take it. These come from below that range, where the kernel hands out
nothing by itself, and never twice in one run. Under pytest-xdist each worker is a process of its own with its own
record of what it handed out, so each takes ports only from its own slice of the range."""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

LOWEST = 20000  # above Mooncake's RPC ports (15000-17000) and the well-known services
_handed_out: set[int] = set()
_cursor: int | None = None  # where the next search starts


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker_slice(lowest: int, end: int) -> tuple[int, int]:
    """This process's part of [lowest, end): all of it, or under pytest-xdist worker gwN's Nth of as many equal
    slices as there are workers."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return lowest, end
    index, workers = int(worker[2:]), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    size = (end - lowest) // workers
    return lowest + index * size, lowest + (index + 1) * size


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def free_port_range(count: int = 1) -> int:
    """The first of `count` consecutive ports that nothing holds now and no earlier call of this run returned. Ranges
    are handed out one after the next from a random point of the slice (so runs that overlap on one host start
    apart), wrapping at its end: placed at random, a run's few dozen ranges of a few hundred ports left no gap wide
    enough for the next one in a slice of some 12,000."""
    global _cursor
    lowest, end = _worker_slice(LOWEST, _ephemeral_start())
    top = end - count  # the highest first port whose range ends inside the slice
    if top <= lowest:  # no room below the ephemeral range: take the kernel's pick and accept the race
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]
    if _cursor is None:
        _cursor = random.randint(lowest, top)
    start = min(max(_cursor, lowest), top)
    for base in itertools.chain(range(start, top + 1), range(lowest, start)):
        ports = range(base, base + count)
        if not _handed_out.intersection(ports) and all(_bindable(port) for port in ports):
            _handed_out.update(ports)
            _cursor = base + count
            return base
    raise RuntimeError(f"no {count} free consecutive ports between {lowest} and {end}")


def free_port() -> int:
    return free_port_range(1)
