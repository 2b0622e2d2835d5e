"""Per-worker transfer tally (bytes, durations, copies, failures), handed to vLLM's connector stats each step."""

from __future__ import annotations

from typing import Any


def empty_tally() -> dict[str, Any]:
    return {"bytes": [], "seconds": [], "copies": [], "failures": 0}


class TransferTally:
    """One entry per finished transfer batch, plus a failure count, since the last take()."""

    def __init__(self):
        self.data = empty_tally()

    def record(self, nbytes: int, seconds: float, copies: int) -> None:
        self.data["bytes"].append(nbytes)
        self.data["seconds"].append(seconds)
        self.data["copies"].append(copies)

    def record_failure(self) -> None:
        self.data["failures"] += 1

    def is_empty(self) -> bool:
        return not self.data["bytes"] and not self.data["failures"]
