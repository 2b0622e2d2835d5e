"""Per-worker transfer tally (bytes, durations, copies, KV waits, failures), handed to vLLM's connector stats."""

from __future__ import annotations

from typing import Any

LISTS = ("bytes", "seconds", "copies", "waits")


def empty_tally() -> dict[str, Any]:
    return {**{key: [] for key in LISTS}, "failures": 0}


class TransferTally:
    """One entry per finished transfer batch, one per request whose KV arrived on this decode rank (how long it
    waited, seconds), plus a failure count, since the last take()."""

    def __init__(self):
        self.data = empty_tally()

    def record(self, nbytes: int, seconds: float, copies: int) -> None:
        self.data["bytes"].append(nbytes)
        self.data["seconds"].append(seconds)
        self.data["copies"].append(copies)

    def record_wait(self, seconds: float) -> None:
        self.data["waits"].append(seconds)

    def record_failure(self) -> None:
        self.data["failures"] += 1

    def is_empty(self) -> bool:
        return not any(self.data[key] for key in LISTS) and not self.data["failures"]
