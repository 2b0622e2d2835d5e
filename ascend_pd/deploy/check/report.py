"""What `check` found: a row per engine rank and per proxy replica, the canary, and the KV evidence; as data that
the CLI prints as a table or as JSON, the same fields either way."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["ok", "failed", "not applicable", "skipped"]


@dataclass(frozen=True)
class Row:
    """One engine rank (instance/dpN) or proxy replica (proxy@node)."""

    name: str
    role: str  # prefill, decode, colocated (as the deployment says), or proxy
    address: str  # host:port
    health: Status
    version: str  # vLLM's, as the engine's /version gives it; "-" for a proxy or an engine not reached
    detail: str  # what failed, or what was seen
    ok: bool


@dataclass(frozen=True)
class Finding:
    """The canary, or the KV evidence: its status, a sentence, and the figures behind it."""

    status: Status
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status != "failed"


@dataclass(frozen=True)
class CheckReport:
    deployment: str  # metadata.name
    source: str  # the deployment file read
    pin: str  # the engine package's pinned range, as the installed ascend-pd states it
    engines: tuple[Row, ...]
    proxies: tuple[Row, ...]
    canary: Finding
    kv_from_prefill: Finding

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.engines + self.proxies) and self.canary.ok and self.kv_from_prefill.ok

    @property
    def failures(self) -> int:
        return (sum(not row.ok for row in self.engines + self.proxies) + (not self.canary.ok)
                + (not self.kv_from_prefill.ok))

    def to_dict(self) -> dict[str, Any]:
        return {"deployment": self.deployment, "source": self.source, "ok": self.ok, "failures": self.failures,
                "pin": self.pin, "engines": [asdict(row) for row in self.engines],
                "proxies": [asdict(row) for row in self.proxies], "canary": asdict(self.canary),
                "kv_from_prefill": asdict(self.kv_from_prefill)}
