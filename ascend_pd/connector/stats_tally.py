"""The first stage of the connector's statistics (this, stats_merged.py, stats_prometheus.py): each worker's transfer
tally (bytes, durations, copies, KV waits, failures, and per request how much of its transfer it exposed) and the
side-channel messages it refused (side_channel.py), handed to vLLM's connector stats."""

from __future__ import annotations

from typing import Any

LISTS = ("bytes", "seconds", "copies", "waits", "exposed", "request_seconds", "request_bytes")


def empty_tally(mode: str = "") -> dict[str, Any]:
    return {**{key: [] for key in LISTS}, "failures": 0, "refused": 0, "mode": mode}


class TransferTally:
    """Since the last take(): one entry per finished transfer batch; per request whose KV arrived on this decode rank,
    how long it waited (seconds) and, when its prefill's end is known, the exposed transfer; plus a failure count."""

    def __init__(self, mode: str = ""):
        self.data = empty_tally(mode)

    def record(self, nbytes: int, seconds: float, copies: int) -> None:
        self.data["bytes"].append(nbytes)
        self.data["seconds"].append(seconds)
        self.data["copies"].append(copies)

    def record_wait(self, seconds: float) -> None:
        self.data["waits"].append(seconds)

    def record_request(self, exposed_s: float, transfer_s: float, nbytes: int) -> None:
        """A request's KV is whole on this decode rank: `exposed_s` after its prefill ended (what the request
        waited for the transfer beyond its prefill), `transfer_s` after its first byte started to move."""
        self.data["exposed"].append(max(0.0, exposed_s))  # clocks of two hosts may disagree by a little
        self.data["request_seconds"].append(max(0.0, transfer_s))
        self.data["request_bytes"].append(nbytes)

    def record_failure(self) -> None:
        self.data["failures"] += 1

    def record_refused(self) -> None:
        """The side channel refused a peer: a failed CURVE handshake (no KV secret), or a message not one request."""
        self.data["refused"] += 1

    def is_empty(self) -> bool:
        return not any(self.data[key] for key in LISTS) and not self.data["failures"] and not self.data["refused"]
