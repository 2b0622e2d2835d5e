"""The prefill's count of requests whose blocks it keeps for decode, inside vLLM's real Scheduler: up when
request_finished keeps the blocks, down when finished_sending frees them, reported through the scheduler's stats on
every change (0 included) and landing in the per-engine gauge the autoscaler reads before stopping the engine."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ascend_pd.connector.connector import AscendPDConnector
from ascend_pd.connector.stats_merged import AscendPDStats
from ascend_pd.connector.stats_tally import TransferTally
from vllm_scheduler import runner_output, request, scheduler, tiny_model_dir, vllm_config

PROMPT = 40
GAUGE = "vllm:ascend_pd_kv_held_requests"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


class Engine:
    """A prefill engine's scheduler with stats on, and the /metrics its stats feed, stepped like EngineCore."""

    def __init__(self, model_dir, mode: str, **config):
        self.sched = scheduler(vllm_config(model_dir, role="kv_producer", mode=mode, **config), log_stats=True)
        self.connector = self.sched.connector
        self.registry = CollectorRegistry()
        metric_types = {kind: partial(kind, registry=self.registry) for kind in (Gauge, Counter, Histogram)}
        self.prom = AscendPDConnector.build_prom_metrics(SimpleNamespace(kv_transfer_config=None), metric_types,
                                                         ["model_name", "engine"], {0: ["tiny", "0"]})
        self.reported: list[dict | None] = []  # each step's connector stats, as the front-end receives them

    def step(self, sample: bool = True, **news) -> dict:
        out = self.sched.schedule()
        outputs = self.sched.update_from_output(out, runner_output(out, sample=sample, **news))
        stats = outputs[0].scheduler_stats.kv_connector_stats if 0 in outputs else None
        self.reported.append(stats)
        if stats is not None:
            self.prom.observe(stats, engine_idx=0)
        return outputs

    def held(self) -> int:
        return self.connector.scheduler_side.held_requests

    def gauge(self) -> float | None:
        return self.registry.get_sample_value(GAUGE, {"model_name": "tiny", "engine": "0"})

    def last_held_report(self):
        stats = self.reported[-1]
        return None if stats is None else stats.get("held")


def prefill(engine: Engine, *ids: str, params: dict | None = None, max_tokens: int = 1) -> None:
    for request_id in ids:
        engine.sched.add_request(request(request_id, PROMPT, dict(params or {"do_remote_decode": True}),
                                         max_tokens=max_tokens))


def test_pull_prefill_counts_held_requests_until_decode_has_read_each_and_reports_the_way_down_to_zero(model_dir):
    engine = Engine(model_dir, "pull")
    assert engine.gauge() == 0  # an engine that never held anything says so, e.g. a decode engine
    free_at_start = engine.sched.kv_cache_manager.block_pool.get_num_free_blocks()
    prefill(engine, "a", "b")
    engine.step()  # both prompts in one step, one token each: finished, blocks kept for decode
    assert engine.held() == 2 and engine.last_held_report() == 2 and engine.gauge() == 2
    engine.step()  # nothing changed: no report, the gauge keeps its level
    assert engine.last_held_report() is None and engine.gauge() == 2
    engine.step(finished_sending={"a"})
    assert engine.held() == 1 and engine.last_held_report() == 1 and engine.gauge() == 1
    engine.step(finished_sending={"b"})
    assert engine.held() == 0 and engine.last_held_report() == 0 and engine.gauge() == 0
    assert engine.sched.kv_cache_manager.block_pool.get_num_free_blocks() == free_at_start
    assert not engine.sched.has_requests()  # vLLM stepped while they were held; now it may go idle at 0


def test_a_request_aborted_while_its_blocks_are_held_stays_counted_until_finished_sending(model_dir):
    """vLLM ignores an abort of a finished request: its blocks stay until the workers report it, so must the count
    (the worker frees them at D's read or at abort_timeout_s, and reports that in finished_sending either way)."""
    from vllm.v1.request import RequestStatus

    engine = Engine(model_dir, "pull")
    prefill(engine, "a")
    engine.step()
    assert engine.sched.finish_requests("a", RequestStatus.FINISHED_ABORTED) == []
    engine.step()
    assert engine.held() == 1 and engine.gauge() == 1
    engine.step(finished_sending={"a"})  # D read it, or the hold timed out on P
    assert engine.held() == 0 and engine.gauge() == 0


def test_a_prefill_aborted_before_it_finished_is_never_counted(model_dir):
    from vllm.v1.request import RequestStatus

    engine = Engine(model_dir, "pull")
    prefill(engine, "a", max_tokens=4)
    engine.sched.schedule()
    engine.sched.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    engine.step()
    assert engine.held() == 0 and engine.reported == [None] and engine.gauge() == 0


def test_a_step_reports_the_workers_transfers_and_the_held_level_once_each(model_dir):
    """The scheduler merges its stats into the workers' of the same step: transfers are summed, the level is
    taken as is, and the next interval's level replaces it in vLLM's log accumulation."""
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorLogging

    engine = Engine(model_dir, "pull")
    prefill(engine, "a", "b")
    tally = TransferTally("pull")
    tally.record(4096, 0.002, copies=1)
    tally.record_failure()
    engine.step(kv_connector_stats=AscendPDStats(data=tally.data))
    stats = engine.reported[-1]
    assert (stats["held"], stats["bytes"], stats["failures"]) == (2, [4096], 1)
    logging = KVConnectorLogging(engine.sched.vllm_config.kv_transfer_config)
    logging.observe(stats)
    engine.step(finished_sending={"a", "b"})
    logging.observe(engine.reported[-1])
    summary = logging.transfer_stats_accumulator.reduce()
    assert summary["Held requests"] == 0 and summary["Failures"] == 1 and summary["Num transfers"] == 1
    assert engine.gauge() == 0


def test_push_prefill_counts_a_request_until_its_kv_is_sent_and_not_one_given_up_mid_prompt(model_dir):
    from vllm.v1.request import RequestStatus

    engine = Engine(model_dir, "push", max_num_batched_tokens=16)
    prefill(engine, "sent", params={"do_remote_decode": True, "transfer_id": "t-1"})
    for chunk in range(3):  # 16 + 16 + 8 tokens; the last chunk samples the one token
        engine.step(sample=chunk == 2)
    assert engine.held() == 1 and engine.gauge() == 1
    prefill(engine, "dropped", params={"do_remote_decode": True, "transfer_id": "t-2"})
    engine.step(sample=False)  # its first chunk is sent...
    engine.sched.finish_requests("dropped", RequestStatus.FINISHED_ABORTED)  # ...then the client leaves
    engine.step()
    assert engine.held() == 1 and engine.gauge() == 1  # released to the sender, its blocks freed by vLLM at once
    engine.step(finished_sending={"sent"})
    assert engine.held() == 0 and engine.last_held_report() == 0 and engine.gauge() == 0
