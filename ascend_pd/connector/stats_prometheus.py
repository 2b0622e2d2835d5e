"""The last stage of the connector's statistics (stats_tally.py, stats_merged.py, this): its Prometheus metrics on each
engine's /metrics: transfer batches, bytes, KV waits, failures, per request the transfer it exposed after its
prefill, by mode, the requests whose KV a prefill engine still holds, and the side-channel messages refused."""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics
from vllm.v1.metrics.utils import create_metric_per_engine

from ascend_pd.deploy.connector_metrics import KV_FAILURES, KV_HELD_REQUESTS, KV_REQUEST_BYTES

_SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
_BYTES_BUCKETS = [2.0**20 * mib for mib in (1, 4, 16, 64, 256, 1024, 4096)]


class AscendPDPromMetrics(KVConnectorPromMetrics):
    """Fed from the workers' tallies merged (stats_merged.py) and the scheduler side's held count, per engine step."""

    def __init__(self, vllm_config, metric_types, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)

        def per_engine(kind, name: str, documentation: str, **extra):
            metric = kind(name=name, documentation=documentation, labelnames=labelnames, **extra)
            return create_metric_per_engine(metric, per_engine_labelvalues)

        def per_engine_and_mode(kind, name: str, documentation: str, **extra):
            # the mode arrives with the workers' tallies; each engine's label values get it appended there
            return kind(name=name, documentation=documentation, labelnames=[*labelnames, "mode"], **extra)

        self._engine_labels = per_engine_labelvalues

        self.batch_seconds = per_engine(
            self._histogram_cls, "vllm:ascend_pd_kv_transfer_seconds",
            "Duration of one Transfer Engine batch (a read on decode in pull mode, a write on prefill in push mode).",
            buckets=_SECONDS_BUCKETS)
        self.wait_seconds = per_engine(
            self._histogram_cls, "vllm:ascend_pd_kv_wait_seconds",
            "Per request and decode rank: from the decode worker taking up the request until all of its KV is in "
            "place (in push mode this overlaps the prefill).", buckets=_SECONDS_BUCKETS)
        self.bytes = per_engine(self._counter_cls, "vllm:ascend_pd_kv_bytes",
                                "KV bytes moved by this engine's workers.")
        self.failures = per_engine(self._counter_cls, KV_FAILURES,
                                   "Requests whose KV transfer failed (they become load errors and are recomputed).")
        self.refused = per_engine(
            self._counter_cls, "vllm:ascend_pd_side_channel_refused",
            "Side-channel connections and messages refused: CURVE handshakes that failed (a peer without the "
            "deployment's KV secret, a port probe) and key holders' messages that are not one request. Each kind is "
            "logged once.")
        self.exposed_seconds = per_engine_and_mode(
            self._histogram_cls, "vllm:ascend_pd_kv_exposed_seconds",
            "Per request and decode rank: from the end of its prefill on P to its whole prompt KV on D, the transfer "
            "the request waits for beyond its prefill (divide by kv_request_transfer_seconds for the exposed share).",
            buckets=_SECONDS_BUCKETS)
        self.request_seconds = per_engine_and_mode(
            self._histogram_cls, "vllm:ascend_pd_kv_request_transfer_seconds",
            "Per request and decode rank: from its first KV byte moving to its whole prompt KV on D.",
            buckets=_SECONDS_BUCKETS)
        self.request_bytes = per_engine_and_mode(
            self._histogram_cls, KV_REQUEST_BYTES,
            "Per request and decode rank: prompt KV bytes moved to it.", buckets=_BYTES_BUCKETS)
        # the autoscaler stops a prefill engine only once this reads 0 (autoscale/engine_kv.py)
        self.held_requests = per_engine(
            self._gauge_cls, KV_HELD_REQUESTS,
            "Requests whose prompt KV this prefill engine still holds for a decode instance to read or is still "
            "sending; 0 means it can stop without failing a handoff.", multiprocess_mode="mostrecent")

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for seconds in transfer_stats_data.get("seconds", []):
            self.batch_seconds[engine_idx].observe(seconds)
        for seconds in transfer_stats_data.get("waits", []):
            self.wait_seconds[engine_idx].observe(seconds)
        self.bytes[engine_idx].inc(sum(transfer_stats_data.get("bytes", [])))
        self.failures[engine_idx].inc(transfer_stats_data.get("failures", 0))
        self.refused[engine_idx].inc(transfer_stats_data.get("refused", 0))
        if transfer_stats_data.get("held") is not None:  # sent only when it changed
            self.held_requests[engine_idx].set(transfer_stats_data["held"])
        if transfer_stats_data.get("exposed"):
            labels = [*self._engine_labels[engine_idx], transfer_stats_data.get("mode") or "unknown"]
            for metric, key in ((self.exposed_seconds, "exposed"), (self.request_seconds, "request_seconds"),
                                (self.request_bytes, "request_bytes")):
                child = metric.labels(*labels)
                for value in transfer_stats_data[key]:
                    child.observe(value)
