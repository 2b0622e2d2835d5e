"""Transfer statistics: tallies of several ranks merge, reduce for vLLM's log line and land in Prometheus."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ascend_pd.connector.connector import AscendPDConnector
from ascend_pd.connector.stats_merged import AscendPDStats
from ascend_pd.connector.stats_tally import TransferTally


def rank_tally(nbytes: int, seconds: float, wait: float, failures: int = 0) -> TransferTally:
    tally = TransferTally()
    tally.record(nbytes, seconds, copies=2)
    tally.record_wait(wait)
    for _ in range(failures):
        tally.record_failure()
    return tally


def test_two_ranks_merge_into_one_interval_with_their_mean_wait():
    stats = AscendPDStats(data=rank_tally(1_000_000, 0.002, 0.010).data)
    stats.aggregate(AscendPDStats(data=rank_tally(3_000_000, 0.006, 0.030, failures=1).data))
    reduced = stats.reduce()
    assert reduced["Num transfers"] == 2
    assert reduced["Bytes transferred (MB)"] == 4.0
    assert reduced["Throughput (GB/s)"] == pytest.approx(0.5)
    assert reduced["Avg KV wait (ms)"] == pytest.approx(20.0)
    assert reduced["Failures"] == 1
    stats.reset()
    assert stats.is_empty()


def test_a_tally_with_only_a_wait_is_not_empty():
    tally = TransferTally()
    assert tally.is_empty()
    tally.record_wait(0.1)
    assert not tally.is_empty()


def test_prometheus_metrics_count_what_the_workers_reported():
    registry = CollectorRegistry()
    metric_types = {kind: partial(kind, registry=registry) for kind in (Gauge, Counter, Histogram)}
    prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                ["model_name", "engine"], {0: ["tiny", "0"]})
    prom.observe(AscendPDStats(data=rank_tally(4096, 0.003, 0.25, failures=2).data).data, engine_idx=0)
    prom.observe(AscendPDStats(data=rank_tally(1024, 0.001, 0.75).data).data, engine_idx=0)
    labels = {"model_name": "tiny", "engine": "0"}
    value = registry.get_sample_value
    assert value("vllm:ascend_pd_kv_bytes_total", labels) == 5120
    assert value("vllm:ascend_pd_kv_failures_total", labels) == 2
    assert value("vllm:ascend_pd_kv_transfer_seconds_count", labels) == 2
    assert value("vllm:ascend_pd_kv_wait_seconds_sum", labels) == pytest.approx(1.0)
    assert value("vllm:ascend_pd_kv_wait_seconds_bucket", {**labels, "le": "0.5"}) == 1


def test_exposed_transfer_lands_in_histograms_labelled_by_mode():
    registry = CollectorRegistry()
    metric_types = {kind: partial(kind, registry=registry) for kind in (Gauge, Counter, Histogram)}
    prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                ["model_name", "engine"], {0: ["tiny", "0"]})
    tally = TransferTally("push")
    tally.record_request(exposed_s=0.02, transfer_s=0.5, nbytes=3 << 20)
    tally.record_request(exposed_s=-0.001, transfer_s=0.25, nbytes=1 << 20)  # clocks a hair apart: none exposed
    stats = AscendPDStats(data=tally.data)
    assert stats.reduce()["Exposed share"] == pytest.approx(0.02 / 0.75, abs=1e-3)
    prom.observe(stats.data, engine_idx=0)
    labels = {"model_name": "tiny", "engine": "0", "mode": "push"}
    value = registry.get_sample_value
    assert value("vllm:ascend_pd_kv_exposed_seconds_sum", labels) == pytest.approx(0.02)
    assert value("vllm:ascend_pd_kv_exposed_seconds_count", labels) == 2
    assert value("vllm:ascend_pd_kv_request_transfer_seconds_sum", labels) == pytest.approx(0.75)
    assert value("vllm:ascend_pd_kv_request_bytes_bucket", {**labels, "le": "4.194304e+06"}) == 2  # 4 MiB
    assert value("vllm:ascend_pd_kv_exposed_seconds_count", {**labels, "mode": "pull"}) is None


def test_ranks_of_one_engine_merge_with_their_mode():
    stats = AscendPDStats(data=TransferTally("pull").data)
    other = TransferTally("pull")
    other.record_request(0.1, 0.1, 10)
    stats.aggregate(AscendPDStats(data=other.data))
    assert stats.data["mode"] == "pull" and stats.data["exposed"] == [0.1]


def test_the_held_count_is_a_level_the_latest_report_wins_and_zero_is_news():
    stats = AscendPDStats(data={**TransferTally("pull").data, "held": 3})
    stats.aggregate(AscendPDStats(data=rank_tally(1024, 0.001, 0.1).data))  # a worker's step: no level in it
    assert stats.data["held"] == 3
    stats.aggregate(AscendPDStats(data={**TransferTally("pull").data, "held": 0}))
    assert stats.data["held"] == 0 and stats.reduce()["Held requests"] == 0
    assert not AscendPDStats(data={**TransferTally().data, "held": 0}).is_empty()
    assert "Held requests" not in AscendPDStats(data=rank_tally(1, 0.1, 0.1).data).reduce()


def test_the_held_gauge_starts_at_zero_and_moves_only_when_a_level_is_reported():
    registry = CollectorRegistry()
    metric_types = {kind: partial(kind, registry=registry) for kind in (Gauge, Counter, Histogram)}
    prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                ["model_name", "engine"], {0: ["tiny", "0"], 1: ["tiny", "1"]})
    held = partial(registry.get_sample_value, "vllm:ascend_pd_kv_held_requests")
    assert held({"model_name": "tiny", "engine": "0"}) == 0 and held({"model_name": "tiny", "engine": "1"}) == 0
    prom.observe({**TransferTally().data, "held": 4}, engine_idx=1)
    prom.observe(rank_tally(1024, 0.001, 0.1).data, engine_idx=1)  # worker stats alone leave the level alone
    assert held({"model_name": "tiny", "engine": "1"}) == 4 and held({"model_name": "tiny", "engine": "0"}) == 0
    prom.observe({**TransferTally().data, "held": 0}, engine_idx=1)
    assert held({"model_name": "tiny", "engine": "1"}) == 0
