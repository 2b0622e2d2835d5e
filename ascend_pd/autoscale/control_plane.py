"""Every proxy replica of a deployment as one, for the autoscaler: it owns the backend table, keeps it in a store
the replicas read (a file beside them, or a Kubernetes ConfigMap), pushes each change to every replica and waits
until each of their workers serves it; requests in flight are summed over the replicas, and their workload windows
merged. A rollout calls it as it would one proxy (add, drain, remove, backends, wait_idle)."""

from __future__ import annotations

import time
from typing import Callable

import msgspec

from ascend_pd.autoscale.proxy_admin import (POLL_SECONDS, StepFailed, TableConflict, http_json, listed_backends,
                                            readable, wait_until_idle)
from ascend_pd.autoscale.stores import TableStore
from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.proxy.backend_table import BackendTable, TableEntry, draining, table_of, with_entry, without
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.workload_window import WORKLOAD_PARTS, WindowContents, summarise

CONVERGE_SECONDS = 30.0  # a worker takes a pushed table at once, a file within its poll interval (1 s)
CHANGE_ATTEMPTS = 3  # a change redone this often on a table someone else kept changing: stop, and say so


class ControlPlane:
    def __init__(self, replicas: list[str], token: str | None, store: TableStore | None,
                 timeout: float = 10.0, converge: float = CONVERGE_SECONDS):
        self.replicas = [url.rstrip("/") for url in replicas]
        self.token = token
        self.store = store
        self.timeout = timeout
        self.converge = converge
        self._table: BackendTable | None = None  # the last table every replica took
        self._refused: BackendTable | None = None  # the last table a replica refused (409); others may serve it

    def _call(self, replica: str, method: str, path: str, body: dict | None = None):
        return http_json(method, replica + path, body, self.token, self.timeout)

    # ---- the table ----
    def table(self) -> BackendTable:
        """The newest of the store's, the replicas' and the last published table, read again each time: a replica
        changed by hand since holds a generation the next change must pass, or no worker would take it. Of equal
        generations a replica's wins (it may hold a change this process never saw, which the next one builds on),
        and of those one that is not this process's own table some replica refused: after a change given up, the
        replicas that took it and the one that refused it serve the same generation, and only the refusing one's
        holds the other writer's change."""
        tables = [t for t in [*self._replica_tables(), self.store.read() if self.store else None, self._table] if t]
        newest = max(tables, key=lambda t: (t.generation, t != self._refused)) if tables else None
        return newest or BackendTable(0, "unknown", [])

    def served_table(self, replica: str) -> dict:
        """GET /admin/table of `replica`: the table one worker serves, and the generation each of its workers serves."""
        return self._call(replica, "GET", "/admin/table")

    def _replica_table(self, replica: str) -> BackendTable | None:
        """The table `replica` serves; None when it does not answer (a change that waits for it names it)."""
        try:
            answer = self.served_table(replica)
        except StepFailed:
            return None
        if isinstance(answer, dict):
            answer.pop("worker_generations", None)
        return readable(answer, BackendTable, f"GET {replica}/admin/table")

    def _replica_tables(self) -> list[BackendTable]:
        return [t for t in map(self._replica_table, self.replicas) if t is not None]

    def change(self, edit: Callable[[BackendTable], BackendTable], base: BackendTable | None = None) -> BackendTable:
        """Publish `edit` of the newest table (`base`, when just read). A replica that took another writer's change
        since it was read refuses it (409): redo the edit on the table that replica serves, which holds that change
        (not on the newest of all: a replica that took this change before the refusal serves it at the same
        generation), a few times, then StepFailed."""
        for _ in range(CHANGE_ATTEMPTS):
            base = base or self.table()
            table = edit(base)
            try:
                self.publish(table, base.generation)
                return table
            except TableConflict as exc:
                conflict, base = exc, self._replica_table(exc.replica) if exc.replica else None
        raise StepFailed(f"the backend table changed under {CHANGE_ATTEMPTS} tries of this change (is an operator or "
                         f"another autoscaler writing it?); the last: {conflict}")

    def publish(self, table: BackendTable, expected: int) -> None:
        """Make `table`, made from generation `expected`, the one every replica serves: each replica first, then,
        when none refused it as made from an old table, the store (what a restarted worker reads), then wait until
        every worker of every replica serves it. TableConflict names the replica that serves a change made meanwhile
        (the store keeps the table before, which does not undo that change); StepFailed names the replicas that did
        not take or serve it."""
        refused = []
        body = {**msgspec.to_builtins(table), "expected_generation": expected}
        for replica in self.replicas:
            try:
                self._call(replica, "PUT", "/admin/table", body)
            except TableConflict as exc:
                self._refused = table
                raise TableConflict(str(exc), replica) from None
            except StepFailed as exc:  # one that missed the push may still take it from a store it shares
                refused.append(str(exc))
        if self.replicas and len(refused) == len(self.replicas):
            raise StepFailed(f"no proxy replica took backend table generation {table.generation}: "
                             + "; ".join(refused))
        if self.store is not None:
            self.store.write(table)
        self._table = table
        self.wait_converged(table.generation, refused)

    def lagging(self, generation: int) -> dict[str, list[int] | str]:
        """Replicas with a worker below `generation`: their workers' generations, or why they did not answer."""
        behind: dict[str, list[int] | str] = {}
        for replica in self.replicas:
            try:
                served = self.served_table(replica)["worker_generations"]
            except StepFailed as exc:
                behind[replica] = str(exc)
                continue
            if min(served) < generation:
                behind[replica] = served
        return behind

    def wait_converged(self, generation: int, refused: list[str] = ()) -> None:
        deadline = time.monotonic() + self.converge
        while behind := self.lagging(generation):
            if time.monotonic() > deadline:
                raise StepFailed(f"backend table generation {generation} not served within {self.converge:g} s by "
                                 f"{behind}" + (f"; refused: {'; '.join(refused)}" if refused else ""))
            time.sleep(POLL_SECONDS)

    def reconcile(self, endpoints: list[Endpoint], revision: str) -> str | None:
        """Make the table say what the deployment file says, and every replica serve it; what it changed, or None
        when all agreed. A draining mark left by a rollout that was cut short goes too: the file is what runs."""
        wanted = table_of(endpoints, 0, revision).backends
        table = self.table()
        said = None
        if _key(table.backends) != _key(wanted) or table.revision != revision:
            table = self.change(lambda base: base.changed(wanted, revision), table)
            said = f"backend table generation {table.generation}: the {len(wanted)} endpoints of revision {revision}"
        elif behind := self.lagging(table.generation):
            said = f"backend table generation {table.generation} pushed again to {sorted(behind)}"
            self.publish(table, table.generation - 1)  # taken by those behind; those that serve it already keep it
        return said

    # ---- what a rollout calls ----
    def add(self, url: str, role: str, instance: str | None = None, dp_rank: int = 0,
            kv: KVAddress | None = None) -> None:
        entry = TableEntry(url, role, instance, dp_rank, kv)
        self.change(lambda table: with_entry(table, entry))

    def drain(self, url: str) -> None:
        self.change(lambda table: draining(table, url))

    def remove(self, url: str) -> None:
        self.change(lambda table: without(table, url))

    def backends(self) -> dict[str, dict]:
        """Every replica's view of each backend, with requests in flight summed over the replicas."""
        merged: dict[str, dict] = {}
        for replica in self.replicas:
            for backend in listed_backends(replica, self.token, self.timeout):
                seen = merged.setdefault(backend["url"], {**backend, "proxy_inflight": 0, "inflight": 0})
                seen["proxy_inflight"] += backend.get("proxy_inflight", backend["inflight"])
                seen["inflight"] += backend["inflight"]
        return merged

    def wait_idle(self, urls: list[str], seconds: float) -> None:
        """Until no replica has a request in flight on any of `urls`; StepFailed after `seconds`."""
        wait_until_idle(self.backends, urls, seconds)

    # ---- what the loop observes ----
    def workload(self) -> dict:
        """GET /v1/workload's document over every worker of every replica: each worker's arrivals count over the
        time it has watched, so a restarted worker or replica reads neither high nor low. The window is the
        shortest any of them keeps."""
        parts: list[WindowContents] = []
        for replica in self.replicas:
            answer = http_json("GET", replica + WORKLOAD_PARTS, None, self.token, self.timeout)
            parts += readable(answer, list[WindowContents], f"GET {replica}{WORKLOAD_PARTS}")
        if not parts:
            raise StepFailed("no proxy replica to observe")
        return summarise(parts, min(part.window for part in parts), time.time(), [])


def _key(entries: list[TableEntry]) -> list[bytes]:
    """The entries, in any order, as comparable values (a draining mark counts)."""
    return sorted(msgspec.json.encode(e) for e in entries)
