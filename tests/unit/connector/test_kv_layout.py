"""Cache planes read from the shapes vLLM backends hand to register_kv_caches."""

from __future__ import annotations

import pytest
import torch

from ascend_pd.connector.kv_layout import cache_planes, registration_regions


def test_a_stacked_kv_tensor_gives_a_k_and_a_v_plane():
    cache = torch.zeros(2, 10, 16, 4, 64, dtype=torch.bfloat16)  # [2, nb, bs, H, D]
    k, v = cache_planes({"l0": cache})
    block_bytes = 16 * 4 * 64 * 2
    assert (k.info.base_addr, v.info.base_addr) == (cache.data_ptr(), cache.data_ptr() + 10 * block_bytes)
    assert (k.info.block_len, k.info.block_stride, k.info.num_heads, k.block_size) == (block_bytes, block_bytes, 4, 16)


def test_an_ascend_k_v_pair_and_an_mla_nope_rope_pair_are_two_planes_each():
    gqa = (torch.zeros(10, 128, 2, 128, dtype=torch.bfloat16), torch.zeros(10, 128, 2, 128, dtype=torch.bfloat16))
    mla = (torch.zeros(10, 128, 1, 512, dtype=torch.bfloat16), torch.zeros(10, 128, 1, 64, dtype=torch.bfloat16))
    planes = cache_planes({"gqa": gqa, "mla": mla})
    assert [(p.layer, p.info.num_heads, p.info.block_len) for p in planes] == [
        ("gqa", 2, 128 * 2 * 128 * 2), ("gqa", 2, 128 * 2 * 128 * 2),
        ("mla", 1, 128 * 512 * 2), ("mla", 1, 128 * 64 * 2)]


def test_the_cpu_attention_layout_is_heads_outer_with_k_and_v_side_by_side():
    cache = torch.zeros(10, 4, 32, 2 * 64, dtype=torch.bfloat16)  # [nb, H, bs, 2*D]
    (plane,) = cache_planes({"l0": cache}, heads_outer=True)
    assert (plane.info.num_heads, plane.block_size, plane.info.heads_outer) == (4, 32, True)


def test_a_fused_mla_cache_is_one_plane_of_one_head():
    (plane,) = cache_planes({"l0": torch.zeros(10, 16, 576, dtype=torch.bfloat16)})
    assert (plane.info.num_heads, plane.block_size, plane.info.block_len) == (1, 16, 16 * 576 * 2)


def test_layers_with_different_block_sizes_are_refused():
    with pytest.raises(ValueError, match="block size"):
        cache_planes({"a": torch.zeros(4, 16, 1, 8), "b": torch.zeros(4, 32, 1, 8)})


def test_registration_covers_a_layers_views_of_one_allocation_as_one_region():
    cache = torch.zeros(2, 10, 16, 4, 64, dtype=torch.bfloat16)
    regions = registration_regions(cache_planes({"l0": cache}))
    assert regions == [(cache.data_ptr(), cache.numel() * 2)]


def test_views_of_one_buffer_holding_several_layers_merge_into_one_region():
    pool = torch.zeros(3, 2, 10, 16, 4, 64, dtype=torch.bfloat16)
    regions = registration_regions(cache_planes({f"l{i}": pool[i] for i in range(3)}))
    assert regions == [(pool.data_ptr(), pool.numel() * 2)]


def test_padded_separate_k_and_v_allocations_are_registered_from_their_aligned_start():
    """vllm-ascend allocates K and V of a layer apart, each in a buffer padded for 2 MiB alignment, and views the
    cache inside it; it registers each view's own aligned span (KVU/utils.py), never the raw, unaligned storage
    base. Regions of separate allocations stay apart even where the allocator placed them back to back."""
    align = 2 << 20
    nbytes = 10 * 16 * 4 * 64 * 2
    buffers, caches = [], {}
    for layer in range(3):
        planes = []
        for _ in range(2):
            raw = torch.zeros(nbytes + align, dtype=torch.uint8)
            offset = -raw.data_ptr() % align or align  # never at the storage base: the padding comes first
            planes.append(raw[offset:offset + nbytes].view(torch.bfloat16).view(10, 16, 4, 64))
            buffers.append(raw)
        caches[f"l{layer}"] = tuple(planes)
    regions = registration_regions(cache_planes(caches))
    views = [p for planes in caches.values() for p in planes]
    assert sorted(regions) == sorted((v.data_ptr(), nbytes) for v in views)
    assert all(start % align == 0 for start, _ in regions)
    assert not {start for start, _ in regions} & {raw.data_ptr() for raw in buffers}


def test_kernel_blocks_smaller_than_the_managers_blocks_are_grouped_so_block_ids_mean_manager_blocks():
    """vLLM's CPU MLA kernel takes 16-token blocks under a 32-token KV cache manager: manager block 3 is kernel
    blocks 6 and 7, for MLA on CPU (heads outer) and for an NHD cache alike."""
    mla = torch.arange(10 * 16 * 576, dtype=torch.float32).view(10, 16, 576)
    (plane,) = cache_planes({"l0": mla}, heads_outer=True, block_size=32)
    assert (plane.info.num_blocks, plane.block_size, plane.info.block_len) == (5, 32, 32 * 576 * 4)
    assert torch.equal(plane.tensor[3].flatten(), mla[6:8].flatten())
    nhd = torch.arange(8 * 16 * 2 * 8, dtype=torch.float32).view(8, 16, 2, 8)
    (plane,) = cache_planes({"l0": nhd}, block_size=64)
    assert (plane.info.num_blocks, plane.block_size, plane.info.block_stride) == (2, 64, 64 * 2 * 8 * 4)
    assert torch.equal(plane.tensor[1], nhd[4:8].reshape(64, 2, 8))


def test_kernel_blocks_that_do_not_tile_the_managers_blocks_are_refused():
    with pytest.raises(ValueError, match="do not tile"):
        cache_planes({"l0": torch.zeros(10, 16, 576)}, heads_outer=True, block_size=24)
    with pytest.raises(ValueError, match="not supported"):
        cache_planes({"l0": torch.zeros(10, 4, 16, 128)}, heads_outer=True, block_size=32)
