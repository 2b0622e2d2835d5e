"""Properties of the cost model's pieces, each checked against a hand computation or a monotonicity property."""

import random

import numpy as np

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_pd.hardware import LinkTier, load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.comm import all_reduce_time, all_to_all_time
from ascend_pd.perf.cost import CostModel, accepted_tokens_per_step
from ascend_pd.perf.exec_mode import ExecMode
from ascend_pd.perf.shape import Shape, group_link
from tests import fuzz

CM384 = load_cluster("cloudmatrix384")
A2 = load_cluster("atlas-800i-a2-x4")
DSR1 = CostModel(get_model("deepseek-r1"), CM384.chip, CM384, "w8a8", "bf16")
QWEN = CostModel(get_model("qwen3-32b"), A2.chip, A2, "bf16", "bf16")


def test_one_draft_token_accepted_70_percent_emits_1_7_tokens_per_step():
    assert accepted_tokens_per_step(1, 0.7) == pytest.approx(1.7)
    assert accepted_tokens_per_step(0, 0.9) == 1


def test_tokens_per_step_match_drafts_verified_one_after_another():
    # Play the steps out: the target model always emits one token, and draft j counts only if drafts 1..j-1 did.
    rng = random.Random(7)
    for mtp, acceptance in ((2, 0.5), (3, 0.8)):
        steps, emitted = 20_000, 0
        for _ in range(steps):
            emitted += 1
            for _ in range(mtp):
                if rng.random() >= acceptance:
                    break
                emitted += 1
        assert accepted_tokens_per_step(mtp, acceptance) == pytest.approx(emitted / steps, rel=0.02)


def test_ring_all_reduce_of_8_ranks_moves_7_eighths_twice():
    link = LinkTier("l", "node", bandwidth=100e9, latency=1e-6, tp_capable=True)
    # 1 GB: reduce-scatter and all-gather each send 7/8 GB per device at 100 GB/s, with 7 hops each.
    assert all_reduce_time(1e9, 8, link) == pytest.approx(2 * 0.875e9 / 100e9 + 14e-6)


def test_full_mesh_all_reduce_sends_one_slice_per_peer_at_once():
    link = LinkTier("hccs", "node", bandwidth=56e9, latency=2e-6, tp_capable=True, full_mesh=True)
    assert all_reduce_time(8e9, 8, link) == pytest.approx(2 * 1e9 / 56e9 + 4e-6)


def test_all_to_all_keeps_the_local_share_at_home():
    link = LinkTier("ub", "superpod", bandwidth=200e9, latency=0.0, tp_capable=True)
    assert all_to_all_time(4e9, 4, link) == pytest.approx(3e9 / 200e9)
    assert all_to_all_time(4e9, 1, link) == 0


def test_groups_use_the_tightest_tier_that_holds_them():
    assert group_link(CM384, 2).name == "sio"
    assert group_link(CM384, 16).name == "hccs-l1"
    assert group_link(CM384, 320).name == "ub"
    assert group_link(A2, 8).name == "hccs"
    assert group_link(A2, 16).name == "roce"
    assert group_link(A2, 1) is None


@settings(max_examples=fuzz.examples(40), deadline=None)
@given(short=st.integers(16, 32000), extra=st.integers(0, 32000), tp=st.sampled_from([1, 2, 4, 8]))
def test_longer_prompts_never_lower_ttft(short, extra, tp):
    shape = Shape(tp=tp)
    assert QWEN.prefill_time(shape, [short + extra]).total >= QWEN.prefill_time(shape, [short]).total


@settings(max_examples=fuzz.examples(40), deadline=None)
@given(batch=st.integers(1, 200), more=st.integers(0, 200), context=st.integers(128, 32000))
def test_bigger_decode_batches_never_step_faster(batch, more, context):
    shape = Shape(tp=1, dp=32, ep=32)
    assert DSR1.decode_step(shape, batch + more, context).total >= DSR1.decode_step(shape, batch, context).total


def test_small_dense_decode_is_memory_bound_at_the_weight_read_rate():
    # Qwen3-32B bf16 at TP4, one sequence: each device reads a quarter of ~65.5 GB of weights per step.
    step = QWEN.decode_step(Shape(tp=4), 1, 1024)
    weights = get_model("qwen3-32b").weight_bytes("bf16")
    lookup = 151936 * 5120 * 2
    hbm = A2.chip.hbm_bandwidth * QWEN.cal.hbm_efficiency
    assert step.parts["weights_read"] == pytest.approx((weights - lookup) / 4 / hbm, rel=1e-9)
    assert step.parts["weights_read"] > step.parts["compute"]


def test_decode_kv_capacity_shrinks_as_sequences_grow():
    shape = Shape(tp=4)
    sizes = [QWEN.max_decode_batch(shape, n) for n in (1024, 2048, 4096, 8192)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] >= 1
    # GQA over TP4 of 8 KV heads: each device holds 2 heads, a quarter of 262,144 B per token.
    fit = QWEN.memory(shape)
    assert fit.kv_bytes_per_token == 262144 / 4
    assert QWEN.max_decode_batch(shape, 1024) == int(fit.kv_capacity_tokens // 1024)


def test_pushed_kv_hides_behind_a_longer_prefill_but_pulled_kv_does_not():
    transfer = DSR1.kv_transfer_time(Shape(tp=8), 4096, DSR1.kv_link(32))
    assert DSR1.kv_exposed_time(transfer, prefill=1.0, mode="push") == pytest.approx(transfer / 61)
    assert DSR1.kv_exposed_time(transfer, prefill=1.0, mode="pull") == transfer


def test_kv_of_a_4k_prompt_over_roce_matches_bytes_over_bandwidth():
    # 4096 tokens x 262,144 B of Qwen3-32B from a TP4 rank: a quarter per device over 25 GB/s RoCE + 10 us.
    seconds = QWEN.kv_transfer_time(Shape(tp=4), 4096, QWEN.kv_link(16))
    assert seconds == pytest.approx(4096 * 262144 / 4 / 25e9 + 10e-6)


@pytest.mark.parametrize("model, cluster, shape", [("deepseek-r1", "cloudmatrix384", Shape(tp=4, dp=4, ep=16)),
                                                   ("deepseek-r1", "cloudmatrix384", Shape(tp=16)),
                                                   ("qwen3-32b", "atlas-800i-a2-x4", Shape(tp=4)),
                                                   ("qwen3-235b-a22b", "atlas-800t-a3-x4", Shape(tp=4, dp=4, ep=16))])
@pytest.mark.parametrize("profile", ["cloudmatrix-infer", "vllm-ascend"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_batch_timer_the_planner_plays_prefill_with_is_prefill_time(model, cluster, shape, profile,
                                                                         async_scheduling):
    from dataclasses import replace

    from ascend_pd.perf.context import cost_model

    cost = replace(cost_model(model, cluster, calibration=profile), mode=ExecMode("full", async_scheduling))
    timer = cost.prefill_step_timer(shape)
    rng = np.random.default_rng(7)
    for _ in range(50):
        prompts = [float(n) for n in rng.integers(1, 16000, rng.integers(1, 6))]
        expected = cost.prefill_time(shape, prompts).total
        assert timer(sum(prompts), sum(n * n for n in prompts), len(prompts)) == pytest.approx(expected, rel=1e-9)


def test_with_an_int8_kv_cache_only_decode_holds_int8_prefill_keeps_bf16():
    """vllm-ascend's C8 gives only the KV consumer an int8 cache: on the same shape a prefill instance holds about
    half the tokens a decode instance does, and exactly what it holds with a bf16 cache."""
    cluster = load_cluster("atlas-800i-a2-x4")
    model = get_model("qwen3-32b")
    int8 = CostModel(model, cluster.chip, cluster, "w8a8", "int8")
    bf16 = CostModel(model, cluster.chip, cluster, "w8a8", "bf16")
    shape = Shape(tp=4, dp=1, ep=1)
    prefill, decode = (int8.memory(shape, role=role).kv_capacity_tokens for role in ("prefill", "decode"))
    assert prefill == bf16.memory(shape, role="prefill").kv_capacity_tokens
    assert decode == pytest.approx(2 * prefill, rel=0.01)


# --- execution modes ------------------------------------------------------------------------------------------------
def _vllm_ascend(mode: ExecMode, **values) -> CostModel:
    from ascend_pd.perf.calibration import load_calibration

    calibration = load_calibration("vllm-ascend", A2.chip.id).with_values(**values)
    return CostModel(get_model("qwen3-32b"), A2.chip, A2, "bf16", "bf16", calibration, mode=mode)


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_a_decode_step_costs_the_host_most_op_by_op_and_least_as_one_graph(batch):
    steps = {graph: _vllm_ascend(ExecMode(graph)).decode_step(Shape(tp=4), batch, 2048).total
             for graph in ("eager", "piecewise", "full")}
    assert steps["full"] <= steps["eager"] and steps["full"] <= steps["piecewise"]


@given(st.sampled_from(["eager", "piecewise", "full"]), st.floats(0.0, 0.05), st.floats(0.0, 0.002),
       st.integers(1, 128), st.floats(128, 32768))
@settings(max_examples=fuzz.examples(60), deadline=None)
def test_async_scheduling_makes_a_step_the_longer_of_device_and_host(graph, schedule, per_layer, batch, context):
    """Sync: the host schedules, then launches while the device runs (scheduling + the longer of launches and
    kernels). Async: the next step's scheduling runs during this one (the longer of host work and kernels)."""
    values = dict(step_overhead_s=schedule, sampling_per_token_s=0.0, layer_overhead_eager_s=per_layer,
                  layer_overhead_piecewise_s=per_layer, layer_overhead_graph_s=per_layer)
    device = _vllm_ascend(ExecMode(graph), **{**values, "step_overhead_s": 0.0, "layer_overhead_eager_s": 0.0,
                                             "layer_overhead_piecewise_s": 0.0, "layer_overhead_graph_s": 0.0})
    kernels = device.decode_step(Shape(tp=4), batch, context).total
    launches = 64 * per_layer  # Qwen3-32B has 64 layers
    sync = _vllm_ascend(ExecMode(graph, False), **values).decode_step(Shape(tp=4), batch, context).total
    overlapped = _vllm_ascend(ExecMode(graph, True), **values).decode_step(Shape(tp=4), batch, context).total
    assert sync == pytest.approx(schedule + max(kernels, launches), rel=1e-9, abs=1e-12)
    assert overlapped == pytest.approx(max(kernels, launches + schedule), rel=1e-9, abs=1e-12)
    assert overlapped <= sync + 1e-12


def test_ttft_as_a_client_sees_it_adds_the_request_path_once():
    from ascend_pd.perf.fitting import Row

    cost = _vllm_ascend(ExecMode("full"))
    row = Row(label="x", model=cost.model, cluster=A2, quantization="bf16", kv_dtype="bf16", metric="ttft",
              shape=Shape(tp=4), measured=1.0, prompt=1024)
    alone = cost.prefill_time(Shape(tp=4), [1024]).total
    assert row.predict(cost.cal) == pytest.approx(alone + cost.cal.request_overhead_s)


def test_a_burst_of_prompts_waits_for_the_steps_before_its_last_chunk():
    """Four 1,000-token prompts at once, 2,000 tokens a step: the first two finish with step 1, the others with step
    2, so the mean TTFT is 1.5 steps of 2,000 tokens (plus the request path)."""
    from ascend_pd.perf.fitting import Row

    cost = _vllm_ascend(ExecMode("full"))
    row = Row(label="x", model=cost.model, cluster=A2, quantization="bf16", kv_dtype="bf16", metric="ttft",
              shape=Shape(tp=4), measured=1.0, prompt=1000, prompts_in_flight=4, step_tokens=2000)
    step = cost.prefill_time(Shape(tp=4), [1000, 1000]).total
    assert row.predict(cost.cal) == pytest.approx(1.5 * step + cost.cal.request_overhead_s)
