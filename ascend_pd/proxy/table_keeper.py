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
        """`start`: the table from the proxy's flags (generation 0). The file's wins when it serves the same
        deployment revision: changes made to this deployment since it started. One of another revision is what ran
        before the deployment file was rewritten (a finished rollout, a new render), which the file now says better."""
        self.pool = pool
        self.path = path
        self.table = start
        self._seen = self._stat()  # the file's (mtime, size) when last read: the poll takes only later writes
        apply_table(pool, start)
        found = read_table(path) if path is not None else None  # bad input here stops the proxy at start
        if found is not None and found.revision == start.revision:
            self.offer(found, persist=False)
        elif found is not None:
            log.info("backend table %s serves revision %s, the deployment is %s: starting from the deployment",
                     path, found.revision, start.revision)

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
        seen = self._stat()
        if seen is None or seen == self._seen:
            return
        self._seen = seen
        try:
            table = read_table(self.path)
        except InputError as exc:  # half-edited by hand, say: keep serving the table in hand
            log.warning("%s", exc.render())
            return
        if table is not None:
            self.offer(table, persist=False)

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat() if self.path is not None else None
        except OSError:
            return None
        return None if stat is None else (stat.st_mtime_ns, stat.st_size)

    async def watch(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.poll_file()
