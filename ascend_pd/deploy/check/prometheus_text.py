"""Counters read from a Prometheus text page, as vLLM's /metrics serves it; enough for `check`, without
prometheus_client (an optional dependency)."""

from __future__ import annotations

import math


def sample_sum(page: str, name: str) -> float | None:
    """The sum of every sample named exactly `name` (all label sets: one per engine core, per mode); None when the
    page has none."""
    total, found = 0.0, False
    for line in page.splitlines():
        if not line.startswith(name) or line[len(name):len(name) + 1] not in ("{", " "):
            continue
        # the value follows the labels (whose values may hold spaces), then an optional timestamp
        rest = line[line.rindex("}") + 1:] if line[len(name)] == "{" else line[len(name):]
        fields = rest.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if math.isfinite(value):
            total, found = total + value, True
    return total if found else None
