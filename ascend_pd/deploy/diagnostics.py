"""Diagnostics: what validation found, with a stable code, severity, YAML path, line, message and hint."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Diagnostic:
    code: str  # stable, e.g. APD102; documented in the README
    severity: Severity
    path: str  # YAML path, e.g. instances[1].devices[0].devices
    message: str
    hint: str
    line: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def render(self, source: str = "") -> str:
        where = f"{source}:{self.line}" if source and self.line else source
        location = f"{where}: " if where else ""
        return f"{location}{self.severity} {self.code} at {self.path}: {self.message}\n  hint: {self.hint}"


def has_errors(diagnostics: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)
