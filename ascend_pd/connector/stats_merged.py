"""The middle stage of the connector's statistics (stats_tally.py, this, stats_prometheus.py): what vLLM's connector
stats carry, merged: the workers' bytes, transfers, durations and failures, and from the scheduler side the number
of requests whose blocks the connector still holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

from ascend_pd.connector.stats_tally import LISTS, empty_tally


@dataclass
class AscendPDStats(KVConnectorStats):
    """The workers' tallies (stats_tally.py), merged across ranks and reduced for vLLM's stats logger. `held`, when
    present, is the scheduler side's count of held requests (scheduler.py): a level, not a sum."""

    data: dict[str, Any] = field(default_factory=empty_tally)

    def reset(self) -> None:
        self.data = empty_tally()

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for key in LISTS:
            self.data[key].extend(other.data.get(key, []))
        self.data["failures"] += other.data.get("failures", 0)
        self.data["refused"] = self.data.get("refused", 0) + other.data.get("refused", 0)
        self.data["mode"] = self.data.get("mode") or other.data.get("mode", "")
        # vLLM aggregates in time order (worker stats with the scheduler's of the same step, then interval after
        # interval in its logger): the latest level wins, adding two would count the same requests twice.
        if other.data.get("held") is not None:
            self.data["held"] = other.data["held"]
        return self

    def is_empty(self) -> bool:
        # a held count of 0 is news (the gauge must come down), not emptiness
        return (not any(self.data[key] for key in LISTS) and not self.data["failures"]
                and not self.data.get("refused") and self.data.get("held") is None)

    def reduce(self) -> dict[str, int | float]:
        total_bytes, total_seconds = sum(self.data["bytes"]), sum(self.data["seconds"])
        waits, exposed, request_seconds = self.data["waits"], self.data["exposed"], self.data["request_seconds"]
        return {
            "Num transfers": len(self.data["bytes"]),
            "Bytes transferred (MB)": round(total_bytes / 1e6, 3),
            "Avg transfer duration (ms)": round(1e3 * total_seconds / max(1, len(self.data["seconds"])), 3),
            "Throughput (GB/s)": round(total_bytes / total_seconds / 1e9, 3) if total_seconds else 0.0,
            "Copies": sum(self.data["copies"]),
            "Avg KV wait (ms)": round(1e3 * sum(waits) / len(waits), 3) if waits else 0.0,
            "Avg exposed transfer (ms)": round(1e3 * sum(exposed) / len(exposed), 3) if exposed else 0.0,
            # of the requests' transfers (first byte moving to KV whole on D), the part that came after prefill
            "Exposed share": round(sum(exposed) / sum(request_seconds), 3) if sum(request_seconds) else 0.0,
            "Failures": self.data["failures"],
            "Refused peer messages": self.data.get("refused", 0),
            **({"Held requests": self.data["held"]} if self.data.get("held") is not None else {}),
        }
