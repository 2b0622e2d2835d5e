"""A hidden memory probe for soak runs: with ASCEND_PD_PROXY_TRACEMALLOC=DIR set, the proxy traces its
allocations and writes a tracemalloc snapshot to DIR on every SIGUSR1, so snapshots taken over a long run can be
diffed to find what grows. Off (and free) when the variable is unset."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import tracemalloc
from pathlib import Path

ENV_VAR = "ASCEND_PD_PROXY_TRACEMALLOC"
FRAMES = 8  # deep enough to see which proxy function allocated through aiohttp

log = logging.getLogger("ascend_pd.proxy.memory")


class SnapshotWriter:
    def __init__(self, directory: Path):
        self.directory = directory
        self._numbers = itertools.count()

    def write(self) -> Path:
        """Dump under a temporary name, then rename: a reader watching DIR never opens a half-written snapshot."""
        path = self.directory / f"proxy-{os.getpid()}-{next(self._numbers):04d}.tracemalloc"
        partial = path.with_name(path.name + ".partial")
        tracemalloc.take_snapshot().dump(str(partial))
        os.replace(partial, path)
        return path


def install_from_environment(loop: asyncio.AbstractEventLoop, environ=os.environ) -> SnapshotWriter | None:
    """Start tracing and answer SIGUSR1 with a snapshot when ENV_VAR names a directory; else do nothing."""
    directory = environ.get(ENV_VAR)
    if not directory:
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    writer = SnapshotWriter(Path(directory))
    tracemalloc.start(FRAMES)
    loop.add_signal_handler(signal.SIGUSR1, lambda: log.info("tracemalloc snapshot %s", writer.write()))
    return writer
