"""The AscendC kernels, compiled against the CPU stand-in of the AscendC API, equal the torch reference."""

from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from ascendc_cpu import StandIn
from kv_strategies import block_ids, random_cache

from ascend_pd.kernels import plan_tp_transfer, reference
from tests import fuzz

examples = settings(max_examples=fuzz.examples(30), deadline=None)

HEAD_DIMS = [64, 128, 192, 512, 576, 40]  # 40: bf16 rows of 80 bytes, not 32-byte aligned -> DataCopyPad
DTYPES = [torch.bfloat16, torch.int8]
CORE_COUNTS = [1, 3, 8, 40, 48]


@st.composite
def nhd(draw, head_counts=(1, 2, 4, 8), head_dims=HEAD_DIMS):
    shape = (draw(st.integers(1, 6)), draw(st.sampled_from([16, 128])), draw(st.sampled_from(head_counts)),
             draw(st.sampled_from(head_dims)))
    return random_cache(shape, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16)))


def with_cores(library, cores: int) -> StandIn:
    return StandIn(library, vector_cores=cores)


@examples
@given(st.data(), st.sampled_from(CORE_COUNTS))
def test_gather_heads_kernel_matches_reference(standin_library, data, cores):
    cache = data.draw(nhd())
    heads = cache.shape[2]
    head_start = data.draw(st.integers(0, heads - 1))
    head_count = data.draw(st.integers(1, heads - head_start))
    ids = data.draw(block_ids(cache.shape[0], unique=False, max_size=9))
    packed = with_cores(standin_library, cores).gather_heads(cache, ids, head_start, head_count)
    assert torch.equal(packed, reference.gather_heads(cache, ids, head_start, head_count))


@examples
@given(st.data(), st.sampled_from(CORE_COUNTS))
def test_scatter_heads_kernel_matches_reference(standin_library, data, cores):
    cache = data.draw(nhd())
    _, block_size, heads, head_dim = cache.shape
    head_start = data.draw(st.integers(0, heads - 1))
    head_count = data.draw(st.integers(1, heads - head_start))
    ids = data.draw(block_ids(cache.shape[0], unique=True))
    packed = random_cache((len(ids), block_size, head_count, head_dim), cache.dtype, seed=len(ids))
    expected = cache.clone()
    reference.scatter_heads(expected, ids, head_start, packed)
    with_cores(standin_library, cores).scatter_heads(cache, ids, head_start, packed)
    assert torch.equal(cache, expected)


@examples
@given(st.data(), st.sampled_from(CORE_COUNTS))
def test_block_transpose_kernel_matches_reference_staged_in_ub_or_through_workspace(standin_library, data, cores):
    cache = data.draw(nhd(head_counts=(2, 4, 8, 16)))
    split = data.draw(st.sampled_from([s for s in (2, 4, 8) if cache.shape[2] % s == 0]))
    ids = data.draw(block_ids(cache.shape[0], unique=True))
    expected = cache.clone()
    reference.block_transpose(expected, ids, split)
    with_cores(standin_library, cores).block_transpose(cache, ids, split)
    assert torch.equal(cache, expected)


def test_block_transpose_of_a_block_larger_than_ub_goes_through_the_workspace(standin_library):
    cache = random_cache((3, 128, 8, 128), torch.bfloat16, seed=7)  # 256 KiB blocks
    expected = cache.clone()
    reference.block_transpose(expected, [2, 0], 2)
    tiling = with_cores(standin_library, 2).block_transpose(cache, [2, 0], 2)
    assert tiling.fullLoad == 0
    assert torch.equal(cache, expected)


@examples
@given(st.data(), st.sampled_from(CORE_COUNTS))
def test_mla_split_and_fuse_kernels_match_reference(standin_library, data, cores):
    lora, rope_dim = data.draw(st.sampled_from([(512, 64), (128, 64), (40, 24)]))
    fused = random_cache((data.draw(st.integers(1, 5)), data.draw(st.sampled_from([16, 128])), lora + rope_dim),
                         data.draw(st.sampled_from(DTYPES)), data.draw(st.integers(0, 2**16)))
    ids = data.draw(block_ids(fused.shape[0], unique=False))
    nope, rope = with_cores(standin_library, cores).mla_split(fused, ids, rope_dim)
    ref_nope, ref_rope = reference.mla_split(fused, ids, rope_dim)
    assert torch.equal(nope, ref_nope) and torch.equal(rope, ref_rope)
    back = list(range(len(ids)))[::-1]
    fused_back = with_cores(standin_library, cores).mla_fuse(nope, rope, back)
    assert torch.equal(fused_back, reference.mla_fuse(nope, rope, back))


@examples
@given(st.data(), st.sampled_from(CORE_COUNTS))
def test_nd_nz_kernels_match_reference(standin_library, data, cores):
    cache = data.draw(nhd(head_dims=[64, 128, 192, 512, 576]))
    c0 = 32 // cache.element_size()
    ids = data.draw(block_ids(cache.shape[0], unique=False))
    nz = with_cores(standin_library, cores).nd_to_nz(cache, ids)
    assert torch.equal(nz, reference.nd_to_nz(cache, ids, c0))
    back = list(range(len(ids)))
    nd = with_cores(standin_library, cores).nz_to_nd(nz, back, cache.shape[3])
    assert torch.equal(nd, reference.nz_to_nd(nz, back, cache.shape[3]))


@examples
@given(num_kv_heads=st.sampled_from([1, 2, 4, 8]), src_tp=st.sampled_from([1, 2, 4, 8]),
       dst_tp=st.sampled_from([1, 2, 4, 8]), head_dim=st.sampled_from([64, 128, 40]),
       dtype=st.sampled_from(DTYPES), request=st.text(max_size=6))
def test_kernels_move_a_request_between_tp_layouts(standin, num_kv_heads, src_tp, dst_tp, head_dim, dtype, request):
    """Every destination rank ends up with exactly its heads of the prefill KV, however the TP sizes relate."""
    blocks, block_size = 3, 16
    truth = random_cache((blocks, block_size, num_kv_heads, head_dim), dtype, seed=src_tp * 10 + dst_tp)

    def rank_cache(tp, rank):
        per_rank = max(1, num_kv_heads // tp)
        first = rank * num_kv_heads // tp
        return truth[:, :, first:first + per_rank].contiguous()

    sources = [rank_cache(src_tp, r) for r in range(src_tp)]
    plan = plan_tp_transfer(num_kv_heads, src_tp, dst_tp, is_mla=False)
    src_block_ids, dst_block_ids = [2, 0], [1, 2]
    for dst_rank in range(dst_tp):
        local = torch.zeros_like(rank_cache(dst_tp, dst_rank))
        reads = plan.reads(dst_rank, request)
        if len(reads) > 1 and all(read.whole_source_block for read in reads):
            # whole sender blocks land one after another in the local block, then get transposed into place
            for local_block, src_block in zip(dst_block_ids, src_block_ids):
                pieces = [sources[read.src_rank][src_block].reshape(-1) for read in reads]
                local[local_block].view(-1).copy_(torch.cat(pieces))
            standin.block_transpose(local, dst_block_ids, len(reads))
        else:
            for read in reads:
                packed = standin.gather_heads(sources[read.src_rank], src_block_ids, read.src_head_start,
                                              read.head_count)
                standin.scatter_heads(local, dst_block_ids, read.dst_head_start, packed)
        expected = rank_cache(dst_tp, dst_rank)
        assert torch.equal(local[dst_block_ids], expected[src_block_ids])
