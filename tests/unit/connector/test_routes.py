"""Byte routes of heterogeneous-TP reads, worked out by hand for a bf16 cache with 16-token blocks of 64-dim heads."""

from __future__ import annotations

import pytest

from ascend_pd.connector.messages import PlaneInfo
from ascend_pd.connector.routes import (LayoutMismatch, check_block_ids, check_compatible, direct_copies, route,
                                       transpose_split)
from ascend_pd.kernels.tp_mapping import plan_tp_transfer

HEAD_BYTES = 16 * 64 * 2  # one head of one block: 16 tokens x 64 dims x 2 bytes = 2048


def plane(heads: int, heads_outer: bool = False, base: int = 0) -> PlaneInfo:
    return PlaneInfo(base_addr=base, num_blocks=8, block_stride=heads * HEAD_BYTES, block_len=heads * HEAD_BYTES,
                     num_heads=heads, heads_outer=heads_outer)


def test_two_prefill_ranks_fill_the_two_halves_of_an_nhd_block_then_transpose():
    reads = plan_tp_transfer(4, src_tp=2, dst_tp=1, is_mla=False).reads(0, "req")
    routes = [route(r, plane(2), plane(4)) for r in reads]
    # each prefill rank's whole block (2 heads = 4096 bytes) lands in one half of the 8192-byte decode block
    assert [(rt.src_rank, rt.src_offset, rt.dst_offset, rt.length, rt.staged) for rt in routes] == \
        [(0, 0, 0, 4096, False), (1, 0, 4096, 4096, False)]
    assert transpose_split(reads, plane(4), 2) == 2


def test_with_heads_outer_the_halves_are_already_in_place():
    reads = plan_tp_transfer(4, src_tp=2, dst_tp=1, is_mla=False).reads(0, "req")
    assert transpose_split(reads, plane(4, heads_outer=True), 2) == 1


def test_a_decode_rank_with_fewer_heads_takes_a_strided_slice_in_nhd_and_a_contiguous_one_heads_outer():
    (read,) = plan_tp_transfer(4, src_tp=1, dst_tp=2, is_mla=False).reads(1, "req")  # heads 2..3
    nhd = route(read, plane(4), plane(2))
    assert (nhd.staged, nhd.head_start, nhd.head_count, nhd.length) == (True, 2, 2, 4 * HEAD_BYTES)
    outer = route(read, plane(4, True), plane(2, True))
    assert (outer.staged, outer.src_offset, outer.dst_offset, outer.length) == (False, 4096, 0, 4096)


def test_replicated_heads_are_read_once_each_into_their_slot():
    # 2 KV heads on 4 prefill ranks: ranks {0,1} hold head 0 and {2,3} head 1; one decode rank holds both
    reads = plan_tp_transfer(2, src_tp=4, dst_tp=1, is_mla=False).reads(0, "req")
    assert [r.src_rank in (0, 1) for r in reads] == [True, False]
    assert [route(r, plane(1), plane(2)).dst_offset for r in reads] == [0, HEAD_BYTES]


def test_direct_copies_pair_source_and_destination_blocks():
    (read,) = plan_tp_transfer(2, src_tp=1, dst_tp=1, is_mla=False).reads(0, "req")
    src, dst = plane(2, base=1 << 20), plane(2, base=1 << 24)
    rt = route(read, src, dst)
    copies = direct_copies(rt, src, dst, [3, 4], [7, 0])
    assert [(c.src - src.base_addr, c.dst - dst.base_addr, c.length) for c in copies] == \
        [(3 * 4096, 7 * 4096, 4096), (4 * 4096, 0, 4096)]


def test_different_block_sizes_are_refused_with_both_sizes_named():
    with pytest.raises(LayoutMismatch, match="prefill block size 128 != decode block size 16"):
        check_compatible([plane(2)], [plane(2)], 128, 16)


def test_different_head_sizes_are_refused():
    other = PlaneInfo(base_addr=0, num_blocks=8, block_stride=2 * HEAD_BYTES, block_len=HEAD_BYTES, num_heads=2,
                      heads_outer=False)
    with pytest.raises(LayoutMismatch, match="bytes per head"):
        check_compatible([plane(2)], [other], 16, 16)


def test_a_block_id_outside_the_peers_cache_is_refused_before_anything_moves():
    check_block_ids([0, 7], [plane(2), plane(2)], "prefill p0")
    for bad in ([0, 8], [-1]):
        with pytest.raises(LayoutMismatch, match="outside its 8-block cache"):
            check_block_ids(bad, [plane(2)], "prefill p0")
