"""The backend table: the one versioned list of backends every proxy worker and replica serves from.

One writer owns it (the autoscaler, or an operator through the admin API) and raises its generation with each
change; every worker applies a table only when its generation is higher than the one it has, so whatever order
copies arrive in (pushed over HTTP, relayed by a sibling, read from the file at start, a ConfigMap the kubelet
refreshed), each converges to the newest. The file is where a restarted worker finds what was changed since the
proxy started: bash deployments keep it beside the proxy, Kubernetes mounts it from a ConfigMap."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from ascend_pd.atomic import write_atomic
from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.errors import InputError
from ascend_pd.proxy.endpoints import Endpoint, backend_url

if TYPE_CHECKING:
    from ascend_pd.proxy.backends import BackendPool


class TableEntry(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    url: str
    role: str
    instance: str | None = None  # the name metrics and logs give it (default: host:port)
    dp_rank: int = 0
    kv: KVAddress | None = None
    draining: bool = False  # served to the end of its requests, chosen for no new one


class BackendTable(msgspec.Struct, forbid_unknown_fields=True):
    generation: int  # raised by one with every change; a worker applies only a higher one
    revision: str  # the deployment this table serves (ascend_pd.deploy revision of deployment.yaml), or "manual"
    backends: list[TableEntry]

    def entry(self, url: str) -> TableEntry | None:
        return next((e for e in self.backends if e.url == url), None)

    def changed(self, backends: list[TableEntry], revision: str | None = None) -> BackendTable:
        """The next generation with `backends`."""
        return BackendTable(self.generation + 1, revision or self.revision, backends)


class TableWrite(BackendTable, forbid_unknown_fields=True):
    """PUT /admin/table's body: a table and the generation of the one its writer made it from (a compare-and-swap;
    a field of the body rather than If-Match, so the condition travels with the table it guards)."""

    expected_generation: int | None = None  # None only in a relay between a proxy's workers

    def table(self) -> BackendTable:
        return BackendTable(self.generation, self.revision, self.backends)


Table = TypeVar("Table", bound=BackendTable)


def entry_of(endpoint: Endpoint, draining: bool = False) -> TableEntry:
    return TableEntry(endpoint.url, endpoint.role, endpoint.instance, endpoint.dp_rank, endpoint.kv, draining)


def endpoint_of(entry: TableEntry) -> Endpoint:
    return Endpoint(entry.url, entry.role, entry.instance or entry.url.split("://", 1)[-1], entry.dp_rank, entry.kv)


def table_of(endpoints: list[Endpoint], generation: int, revision: str) -> BackendTable:
    return BackendTable(generation, revision, [entry_of(e) for e in endpoints])


def with_entry(table: BackendTable, entry: TableEntry) -> BackendTable:
    """The next generation with `entry` added, or in place of the one at its URL."""
    others = [e for e in table.backends if e.url != entry.url]
    return table.changed(others + [entry] if table.entry(entry.url) is None else
                         [entry if e.url == entry.url else e for e in table.backends])


def draining(table: BackendTable, url: str) -> BackendTable:
    return table.changed([msgspec.structs.replace(e, draining=True) if e.url == url else e for e in table.backends])


def without(table: BackendTable, url: str) -> BackendTable:
    return table.changed([e for e in table.backends if e.url != url])


def apply_table(pool: BackendPool, table: BackendTable) -> None:
    """Make `pool` serve exactly the table's backends: a backend it keeps keeps its load, breaker and readings."""
    wanted = {entry.url: entry for entry in table.backends}
    for backend in pool.all():
        if backend.url not in wanted:
            pool.remove(backend.url)
    for entry in table.backends:
        pool.add(endpoint_of(entry)).draining = entry.draining


def encode_table(table: BackendTable) -> bytes:
    return msgspec.json.encode(table)


def decode_table(body: bytes, source: str, kind: type[Table] = BackendTable) -> Table:
    try:
        table = msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as exc:
        raise InputError(f"not a backend table: {exc}", file=source, field="backends",
                         fix="write it as {\"generation\": N, \"revision\": ..., \"backends\": [{\"url\": ..., "
                             "\"role\": ...}]}, or delete it to start from the deployment") from None
    for index, entry in enumerate(table.backends):
        if entry.role not in ("prefill", "decode", "colocated"):
            raise InputError(f"role '{entry.role}' is not prefill, decode or colocated", file=source,
                             field=f"backends.{index}.role", fix="give one of prefill, decode, colocated")
        canonical = backend_url(entry.url, source, f"backends.{index}.url")
        if entry.url != canonical:  # the URL is the backend's key: another spelling would be another backend
            raise InputError(f"'{entry.url}' is not written as the proxy names backends", file=source,
                             field=f"backends.{index}.url", fix=f"write it as {canonical}")
    return table


def read_table(path: Path) -> BackendTable | None:
    """The table in `path`; None when there is none yet."""
    try:
        body = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"cannot read it: {exc.strerror}", file=str(path), field="--backend-table",
                         fix="give a readable file, or a path where the proxy may create one") from None
    return decode_table(body, str(path))


def write_table(path: Path, table: BackendTable) -> None:
    """Replace `path` with `table` at once and on disk (a reader, or a worker started after a crash, finds the old
    table or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, encode_table(table))
