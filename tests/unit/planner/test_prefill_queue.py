"""The prefill pool the planner sizes prefill on: one rank without batching is an M/D/1 queue, batching raises what
a rank carries, two-choice routing over many ranks waits less than random routing, and a rank's batches are whole
prompts in arrival order."""

import numpy as np
import pytest

from ascend_pd.perf.context import cost_model
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.prefill_queue import PrefillPool
from ascend_pd.planner.prefill_stage import RankQueue

QWEN_A2 = cost_model("qwen3-32b", "atlas-800i-a2-x4")
SHAPE = Shape(tp=4)


def test_one_rank_of_one_prompt_per_step_waits_as_m_d_1():
    prompts = np.full(40000, 2048)
    pool = PrefillPool(QWEN_A2, SHAPE, batch_tokens=2048, prompts=prompts)
    service = QWEN_A2.prefill_time(SHAPE, [2048.0]).total
    rho = 0.7
    run = pool.run(rho / service, ranks=1)
    wait = run.latency - service
    # Pollaczek-Khinchine for deterministic service: W = rho S / (2 (1 - rho)).
    assert wait.mean() == pytest.approx(rho * service / (2 * (1 - rho)), rel=0.1)


def test_batching_short_prompts_carries_more_than_one_prompt_per_step():
    prompts = np.full(5000, 128)
    one_at_a_time = PrefillPool(QWEN_A2, SHAPE, batch_tokens=128, prompts=prompts).saturated_rate()
    batched = PrefillPool(QWEN_A2, SHAPE, batch_tokens=8192, prompts=prompts).saturated_rate()
    # one prompt a step reads every weight once per prompt; a batch reads them once for 64 prompts, and the
    # matmuls then bound the step
    assert batched > 1.1 * one_at_a_time


def test_two_choices_over_sixteen_ranks_waits_less_than_one_rank_per_sixteenth_of_the_load():
    rng = np.random.default_rng(3)
    prompts = rng.integers(512, 4096, 20000)
    pool = PrefillPool(QWEN_A2, SHAPE, batch_tokens=4096, prompts=prompts)
    rate = 0.8 * pool.saturated_rate()
    alone = pool.run(rate, ranks=1).latency
    shared = pool.run(16 * rate, ranks=16).latency
    assert np.percentile(shared, 90) < 0.7 * np.percentile(alone, 90)


def test_a_rank_batches_whole_prompts_in_arrival_order_and_runs_an_overlong_one_alone():
    rank = RankQueue(batch_tokens=1000)
    for request, prompt in enumerate([400, 500, 200, 1500, 100]):
        rank.enqueue(request, prompt)
    batches = []
    while rank.queue:
        batches.append(rank.start().items)
        rank.finish()
    assert batches == [[0, 1], [2], [3], [4]]
    assert rank.outstanding == 0
