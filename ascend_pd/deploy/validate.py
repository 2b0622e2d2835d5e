"""Run every validation rule over a loaded deployment and collect diagnostics, sorted by file position."""

from __future__ import annotations

from pathlib import Path

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.io import LoadedDeployment, load_deployment
from ascend_pd.deploy.rules import RULES, Context
from ascend_pd.errors import InputError


def validate(loaded: LoadedDeployment) -> list[Diagnostic]:
    """All diagnostics for a deployment. Raises InputError only when the cluster or model cannot be loaded."""
    ctx = Context.build(loaded)
    found: list[Diagnostic] = []
    for rule in RULES:
        found.extend(rule(ctx))
    severity_order = {"error": 0, "warning": 1, "info": 2}
    return sorted(found, key=lambda d: (d.line or 0, severity_order[d.severity], d.code, d.path))


def validate_file(path: str | Path) -> tuple[LoadedDeployment, list[Diagnostic]]:
    loaded = load_deployment(path)
    return loaded, validate(loaded)


__all__ = ["InputError", "validate", "validate_file"]
