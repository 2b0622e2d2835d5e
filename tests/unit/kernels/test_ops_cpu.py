"""The fast CPU ops equal the torch reference, and the reference itself means what the layouts say."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from kv_strategies import DTYPES, HEAD_DIMS, block_ids, random_cache

import ascend_pd.kernels as kernels
from ascend_pd.errors import InputError
from ascend_pd.kernels import reference
from tests import fuzz

examples = settings(max_examples=fuzz.examples(40), deadline=None)


@st.composite
def nhd_caches(draw, head_counts=(1, 2, 4, 8), head_dims=HEAD_DIMS):
    shape = (draw(st.integers(1, 6)), draw(st.sampled_from([16, 128])), draw(st.sampled_from(head_counts)),
             draw(st.sampled_from(head_dims)))
    return random_cache(shape, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**16)))


@examples
@given(st.data())
def test_gather_heads_matches_reference(data):
    cache = data.draw(nhd_caches())
    heads = cache.shape[2]
    head_start = data.draw(st.integers(0, heads - 1))
    head_count = data.draw(st.integers(1, heads - head_start))
    ids = data.draw(block_ids(cache.shape[0], unique=False))
    packed = kernels.gather_heads(cache, ids, head_start, head_count)
    assert packed.is_contiguous()
    assert torch.equal(packed, reference.gather_heads(cache, ids, head_start, head_count))


@examples
@given(st.data())
def test_scatter_heads_matches_reference_and_leaves_other_heads_alone(data):
    cache = data.draw(nhd_caches())
    _, block_size, heads, head_dim = cache.shape
    head_start = data.draw(st.integers(0, heads - 1))
    head_count = data.draw(st.integers(1, heads - head_start))
    ids = data.draw(block_ids(cache.shape[0], unique=True))
    packed = random_cache((len(ids), block_size, head_count, head_dim), cache.dtype, seed=len(ids))
    expected = cache.clone()
    reference.scatter_heads(expected, ids, head_start, packed)
    kernels.scatter_heads(cache, ids, head_start, packed)
    assert torch.equal(cache, expected)


@examples
@given(st.data())
def test_block_transpose_matches_reference(data):
    cache = data.draw(nhd_caches(head_counts=(2, 4, 8, 16)))
    split = data.draw(st.sampled_from([s for s in (1, 2, 4, 8) if cache.shape[2] % s == 0]))
    ids = data.draw(block_ids(cache.shape[0], unique=True))
    expected = cache.clone()
    reference.block_transpose(expected, ids, split)
    kernels.block_transpose(cache, ids, split)
    assert torch.equal(cache, expected)


@examples
@given(split=st.sampled_from([2, 4, 8]), block_size=st.sampled_from([16, 128]), seed=st.integers(0, 999))
def test_block_transpose_rebuilds_the_block_the_senders_hold_together(split, block_size, seed):
    # each sender holds heads_per_sender heads of the same token block; whole sender blocks land one after another
    heads_per_sender, head_dim = 2, 64
    senders = [random_cache((block_size, heads_per_sender, head_dim), torch.bfloat16, seed + i) for i in range(split)]
    local = torch.zeros((3, block_size, heads_per_sender * split, head_dim), dtype=torch.bfloat16)
    local[1].view(-1).copy_(torch.cat([s.reshape(-1) for s in senders]))
    kernels.block_transpose(local, [1], split)
    assert torch.equal(local[1], torch.cat(senders, dim=1))
    assert not local[0].any() and not local[2].any()


@examples
@given(st.data())
def test_mla_split_and_fuse_match_reference_and_invert_each_other(data):
    block_size = data.draw(st.sampled_from([16, 128]))
    lora, rope_dim = data.draw(st.sampled_from([(512, 64), (128, 64), (40, 24)]))
    dtype = data.draw(st.sampled_from(DTYPES))
    shape = (data.draw(st.integers(1, 5)), block_size, lora + rope_dim)
    fused = random_cache(shape, dtype, data.draw(st.integers(0, 2**16)))
    ids = data.draw(block_ids(fused.shape[0], unique=False))
    nope, rope = kernels.mla_split(fused, ids, rope_dim)
    ref_nope, ref_rope = reference.mla_split(fused, ids, rope_dim)
    assert torch.equal(nope, ref_nope) and torch.equal(rope, ref_rope)
    assert nope.shape == (len(ids), block_size, 1, lora) and rope.shape == (len(ids), block_size, 1, rope_dim)
    every_block = list(range(len(ids)))
    assert torch.equal(kernels.mla_fuse(nope, rope, every_block), reference.mla_fuse(nope, rope, every_block))
    assert torch.equal(kernels.mla_fuse(nope, rope, every_block), fused[ids])


@examples
@given(st.data())
def test_nd_to_nz_and_back_match_reference(data):
    cache = data.draw(nhd_caches(head_dims=[d for d in HEAD_DIMS if d % 32 == 0]))
    c0 = 32 if cache.dtype == torch.int8 else 16
    ids = data.draw(block_ids(cache.shape[0], unique=False))
    nz = kernels.nd_to_nz(cache, ids)
    assert torch.equal(nz, reference.nd_to_nz(cache, ids, c0))
    every_block = list(range(len(ids)))
    nd = kernels.nz_to_nd(nz, every_block, cache.shape[3])
    assert torch.equal(nd, reference.nz_to_nd(nz, every_block, cache.shape[3]))
    assert torch.equal(nd, cache[ids])


@pytest.mark.parametrize("dtype,c0", [(torch.bfloat16, 16), (torch.int8, 32)])
def test_nz_places_each_element_in_its_fractal(dtype, c0):
    block_size, heads, head_dim = 16, 2, 64
    features = heads * head_dim
    # element value = its position inside the ND block (token * features + feature), kept within int8 by mod
    positions = torch.arange(block_size * features).reshape(1, block_size, heads, head_dim)
    nz = kernels.nd_to_nz((positions % 101).to(dtype), [0])
    for fractal, token, column in [(0, 0, 0), (1, 3, 5), (features // c0 - 1, 15, c0 - 1)]:
        assert int(nz[0, fractal, token, column]) == (token * features + fractal * c0 + column) % 101


def test_gather_heads_names_bad_block_ids():
    cache = torch.zeros((4, 16, 2, 64), dtype=torch.bfloat16)
    with pytest.raises(InputError) as caught:
        kernels.gather_heads(cache, [1, 4], 0, 1)
    assert caught.value.field == "block_ids" and "0..3" in caught.value.fix


def test_scatter_heads_refuses_a_block_written_twice():
    cache = torch.zeros((4, 16, 2, 64), dtype=torch.bfloat16)
    with pytest.raises(InputError, match="twice"):
        kernels.scatter_heads(cache, [2, 2], 0, torch.zeros((2, 16, 1, 64), dtype=torch.bfloat16))


@pytest.mark.parametrize("call,field", [
    (lambda c: kernels.gather_heads(c, [0], 1, 2), "head_start"),
    (lambda c: kernels.block_transpose(c, [0], 3), "split"),
    (lambda c: kernels.gather_heads(c.float(), [0], 0, 1), "cache"),
    (lambda c: kernels.gather_heads(c[0], [0], 0, 1), "cache"),
    (lambda c: kernels.scatter_heads(c, [0], 0, torch.zeros((1, 8, 1, 64), dtype=c.dtype)), "packed"),
    (lambda c: kernels.nz_to_nd(torch.zeros((1, 4, 16, 16), dtype=c.dtype), [0], 48), "head_dim"),
    (lambda c: kernels.nd_to_nz(torch.zeros((1, 8, 1, 64), dtype=c.dtype), [0]), "cache"),
    (lambda c: kernels.mla_split(torch.zeros((1, 16, 64), dtype=c.dtype), [0], 64), "rope_dim"),
])
def test_bad_arguments_name_the_field_and_the_fix(call, field):
    cache = torch.zeros((2, 16, 2, 64), dtype=torch.bfloat16)
    with pytest.raises(InputError) as caught:
        call(cache)
    assert caught.value.field == field and caught.value.fix


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_ops_that_spread_blocks_over_threads_match_reference(two_threads):
    # 4 MiB per call: past the size where the host path hands shares of the blocks to other threads
    cache = random_cache((32, 128, 4, 128), torch.bfloat16, seed=7)
    ids = torch.randperm(32, generator=torch.Generator().manual_seed(3)).tolist()
    nz = kernels.nd_to_nz(cache, ids)
    assert torch.equal(nz, reference.nd_to_nz(cache, ids, 16))
    assert torch.equal(kernels.nz_to_nd(nz, ids, 128), reference.nz_to_nd(nz, ids, 128))
    expected = cache.clone()
    reference.block_transpose(expected, ids, 2)
    kernels.block_transpose(cache, ids, 2)
    assert torch.equal(cache, expected)
    fused = random_cache((32, 128, 576), torch.bfloat16, seed=11)
    nope, rope = kernels.mla_split(fused, ids, 64)
    assert torch.equal(kernels.mla_fuse(nope, rope, ids), reference.mla_fuse(nope, rope, ids))


@pytest.mark.parametrize("name", ["gather_heads", "nd_to_nz", "nz_to_nd", "mla_fuse"])
def test_out_receives_the_result_in_place(name):
    cache = random_cache((3, 16, 2, 64), torch.bfloat16, seed=5)
    nope, rope = kernels.mla_split(random_cache((3, 16, 128), torch.bfloat16, seed=6), [0, 1, 2], 64)
    nz = kernels.nd_to_nz(cache, [0, 1, 2])
    calls = {
        "gather_heads": lambda **out: kernels.gather_heads(cache, [2, 0], 1, 1, **out),
        "nd_to_nz": lambda **out: kernels.nd_to_nz(cache, [2, 0], **out),
        "nz_to_nd": lambda **out: kernels.nz_to_nd(nz, [2, 0], 64, **out),
        "mla_fuse": lambda **out: kernels.mla_fuse(nope, rope, [2, 0], **out),
    }
    expected = calls[name]()
    out = torch.full_like(expected, 7)
    assert calls[name](out=out).data_ptr() == out.data_ptr()
    assert torch.equal(out, expected)
    for wrong in (torch.empty_like(expected).float(), torch.empty(expected.numel() + 1, dtype=expected.dtype),
                  torch.empty_like(expected).transpose(0, 1)):
        with pytest.raises(InputError) as caught:
            calls[name](out=wrong)
        assert caught.value.field == "out" and "contiguous" in caught.value.fix
