"""plan_tp_transfer: every destination head read exactly once from a source rank that holds it, replicas spread."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, strategies as st

from ascend_pd.errors import InputError
from ascend_pd.kernels.tp_mapping import plan_tp_transfer


def owned_heads(num_kv_heads: int, tp: int, rank: int) -> list[int]:
    """Head ownership spelled out from vLLM's rule: disjoint slices, or tp // heads ranks sharing one head."""
    if tp <= num_kv_heads:
        per_rank = num_kv_heads // tp
        return list(range(rank * per_rank, (rank + 1) * per_rank))
    return [rank // (tp // num_kv_heads)]


@st.composite
def layouts(draw):
    num_kv_heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    tps = [1, 2, 4, 8, 16, 32]
    return num_kv_heads, draw(st.sampled_from(tps)), draw(st.sampled_from(tps))


@given(layouts(), st.text(min_size=1, max_size=12))
def test_every_destination_head_is_read_once_from_a_rank_that_holds_it(layout, request_id):
    num_kv_heads, src_tp, dst_tp = layout
    plan = plan_tp_transfer(num_kv_heads, src_tp, dst_tp, is_mla=False)
    for dst_rank in range(dst_tp):
        wanted = owned_heads(num_kv_heads, dst_tp, dst_rank)
        received = [None] * len(wanted)
        for read in plan.reads(dst_rank, request_id):
            source_heads = owned_heads(num_kv_heads, src_tp, read.src_rank)
            for offset in range(read.head_count):
                assert received[read.dst_head_start + offset] is None, "a destination head was read twice"
                received[read.dst_head_start + offset] = source_heads[read.src_head_start + offset]
        assert received == wanted


def test_more_prefill_ranks_than_decode_ranks_reads_whole_source_blocks():
    plan = plan_tp_transfer(num_kv_heads=8, src_tp=4, dst_tp=2, is_mla=False)
    reads = plan.reads(1, "req")
    assert [(r.src_rank, r.src_head_start, r.dst_head_start, r.head_count) for r in reads] == [(2, 0, 0, 2),
                                                                                              (3, 0, 2, 2)]
    assert all(r.whole_source_block for r in reads)


def test_fewer_prefill_ranks_than_decode_ranks_reads_an_offset_head_slice():
    plan = plan_tp_transfer(num_kv_heads=8, src_tp=2, dst_tp=8, is_mla=False)
    (read,) = plan.reads(5, "req")
    # decode rank 5 holds head 5; prefill rank 1 holds heads 4..7, so it is local head 1 there
    assert (read.src_rank, read.src_head_start, read.dst_head_start, read.head_count) == (1, 1, 0, 1)
    assert not read.whole_source_block


def test_replicated_source_heads_spread_over_requests_and_over_destination_ranks():
    # 2 KV heads on 8 prefill ranks: ranks 0-3 hold head 0, ranks 4-7 head 1; 2 decode ranks need one head each
    plan = plan_tp_transfer(num_kv_heads=2, src_tp=8, dst_tp=2, is_mla=False)
    picks = Counter(plan.reads(0, f"request-{i}")[0].src_rank for i in range(2000))
    assert set(picks) == {0, 1, 2, 3}
    assert min(picks.values()) > 2000 / 4 * 0.8


def test_decode_ranks_sharing_a_head_read_different_replicas_of_one_request():
    # 2 heads, prefill tp 8 (4 replicas each), decode tp 8 (4 decode ranks per head)
    plan = plan_tp_transfer(num_kv_heads=2, src_tp=8, dst_tp=8, is_mla=False)
    for request_id in ("a", "b", "c"):
        sources = [plan.reads(dst_rank, request_id)[0].src_rank for dst_rank in range(4)]
        assert sorted(sources) == [0, 1, 2, 3]


def test_mla_reads_one_source_rank_and_spreads_requests_over_all_of_them():
    plan = plan_tp_transfer(num_kv_heads=128, src_tp=8, dst_tp=4, is_mla=True)
    picks = Counter()
    for i in range(800):
        for dst_rank in range(4):
            (read,) = plan.reads(dst_rank, f"r{i}")
            assert (read.src_head_start, read.dst_head_start, read.head_count) == (0, 0, 1)
            picks[read.src_rank] += 1
    assert set(picks) == set(range(8))
    assert min(picks.values()) > 800 * 4 / 8 * 0.8


@pytest.mark.parametrize("heads,src_tp,dst_tp,field", [(6, 4, 2, "src_tp"), (8, 2, 3, "dst_tp"), (8, 0, 2, "src_tp"),
                                                        (0, 2, 2, "num_kv_heads")])
def test_layouts_vllm_cannot_build_are_rejected_with_the_field_to_fix(heads, src_tp, dst_tp, field):
    with pytest.raises(InputError) as caught:
        plan_tp_transfer(heads, src_tp, dst_tp, is_mla=False)
    assert caught.value.field == field and caught.value.fix


def test_tp_mapping_imports_without_torch():
    import subprocess
    import sys
    code = "import sys, ascend_pd.kernels.tp_mapping, ascend_pd.kernels; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
