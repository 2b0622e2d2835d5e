"""One worker's copy of the backend table: what it serves, how a newer table reaches it, and the file that outlives
it. The file is read at start and watched; a table that arrives over HTTP is written to it, so a worker started
again later (or a sibling that missed the relay) still finds it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from ascend_pd.proxy.backend_table import BackendTable, apply_table, read_table, write_table
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.errors import InputError

log = logging.getLogger("ascend_pd.proxy")


class TableKeeper:
    def __init__(self, pool: BackendPool, start: BackendTable, path: Path | None = None):
        """`start`: the table from the proxy's flags (generation 0); the file's, when it has one, wins."""
        self.pool = pool
        self.path = path
        self.table = start
        self._seen: tuple[int, int] | None = None  # the file's (mtime, size) when last read
        apply_table(pool, start)
        if path is not None:
            self.offer(read_table(path) or start, persist=False)  # bad input here stops the proxy at start

    def offer(self, table: BackendTable, persist: bool = True) -> bool:
        """Serve `table` if it is newer than the one served; True when it was. A newer table that came from
        elsewhere goes to the file."""
        if table.generation <= self.table.generation:
            return False
        apply_table(self.pool, table)
        self.table = table
        if persist and self.path is not None:
            try:
                write_table(self.path, table)
            except OSError as exc:  # a ConfigMap mount is read-only: the kubelet brings the file up to date
                log.debug("backend table %s not written: %s", self.path, exc)
        log.info("serving backend table generation %d (%s): %d backends", table.generation, table.revision,
                 len(table.backends))
        return True

    def poll_file(self) -> None:
        """Take the file's table when the file changed since the last look and it is newer."""
        if self.path is None:
            return
        try:
            stat = self.path.stat()
        except OSError:
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            table = read_table(self.path)
        except InputError as exc:  # half-edited by hand, say: keep serving the table in hand
            log.warning("%s", exc.render())
            return
        if table is not None:
            self.offer(table, persist=False)

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.poll_file()
