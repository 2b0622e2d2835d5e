"""The AscendC stand-in fails loudly on tilings and launches the hardware would reject or get wrong."""

from __future__ import annotations

import ctypes

import pytest
import torch

from ascendc_cpu import HardwareRuleViolation, KvTiling, TilingRejected
from kv_strategies import random_cache

from ascend_pd.kernels import reference

UB_BYTES = 192 * 1024


def copy_of(tiling: KvTiling) -> KvTiling:
    clone = KvTiling()
    ctypes.pointer(clone)[0] = tiling
    return clone


def test_host_tiling_keeps_double_buffered_tiles_inside_the_unified_buffer(standin):
    # a row of 8 heads x 128 dims bf16 is 2 KiB; two buffers of 48 rows are 192 KiB
    tiling = standin.plan("gather_heads", 4, 128, 8, 128, 2, 3, 0, 8)
    assert (tiling.bufferNum, tiling.tileTokens, tiling.bufferBytes) == (2, 48, 48 * 2048)
    assert tiling.bufferNum * tiling.bufferBytes <= UB_BYTES


def test_a_tile_of_a_whole_block_overflows_the_unified_buffer(standin):
    cache = random_cache((4, 128, 8, 128), torch.bfloat16, seed=1)
    broken = copy_of(standin.plan("gather_heads", 4, 128, 8, 128, 2, 2, 0, 8))
    broken.tileTokens, broken.bufferBytes = 128, 128 * 2048  # 2 x 256 KiB
    with pytest.raises(HardwareRuleViolation, match="unified buffer overflow"):
        standin.gather_heads(cache, [1, 3], 0, 8, tiling=broken)


def test_more_rows_per_tile_than_the_buffer_holds_is_caught(standin):
    cache = random_cache((4, 128, 4, 128), torch.bfloat16, seed=2)
    broken = copy_of(standin.plan("gather_heads", 4, 128, 4, 128, 2, 1, 0, 4))
    broken.tileTokens *= 2  # the buffer was sized for half as many rows
    with pytest.raises(HardwareRuleViolation, match="overruns"):
        standin.gather_heads(cache, [2], 0, 4, tiling=broken)


def test_datacopy_forced_on_rows_that_are_not_whole_32_byte_blocks_moves_wrong_bytes(standin):
    # one head of 40 bf16 is an 80-byte row: DataCopy counts whole 32-byte blocks, so each row loses its tail and
    # lands at the wrong pitch; the poisoned UB makes the result differ from the reference
    cache = random_cache((2, 16, 4, 40), torch.bfloat16, seed=3)
    tiling = standin.plan("gather_heads", 2, 16, 4, 40, 2, 1, 1, 1)
    assert tiling.aligned == 0, "unaligned rows must be planned for DataCopyPad"
    assert torch.equal(standin.gather_heads(cache, [1], 1, 1, tiling=tiling), reference.gather_heads(cache, [1], 1, 1))
    broken = copy_of(tiling)
    broken.aligned = 1
    packed = standin.gather_heads(cache, [1], 1, 1, tiling=broken)
    assert not torch.equal(packed, reference.gather_heads(cache, [1], 1, 1))


def test_a_copy_length_that_is_not_whole_32_byte_blocks_is_caught(standin):
    # nd_to_nz reads whole token rows with the contiguous DataCopy, which drops a tail shorter than 32 bytes
    cache = random_cache((2, 16, 1, 16), torch.bfloat16, seed=9)  # 32-byte rows
    broken = copy_of(standin.plan("nd_to_nz", 2, 16, 16, 2, 1))
    broken.srcRowElems = broken.dstRowElems = 8  # the kernel now believes rows are 16 bytes,
    broken.tileTokens = 1  # and reads them one at a time
    with pytest.raises(HardwareRuleViolation, match="not a multiple of 32 bytes"):
        standin.run("nd_to_nz", broken, 2, cache, torch.tensor([1], dtype=torch.int32), torch.empty_like(cache))


def test_block_ids_past_the_cache_are_an_out_of_bounds_global_access(standin):
    cache = random_cache((4, 16, 2, 64), torch.int8, seed=4)
    broken = copy_of(standin.plan("gather_heads", 4, 16, 2, 64, 1, 2, 0, 2))
    broken.srcBlocks = 2  # the kernel believes the cache has 2 blocks; block 3 lies outside
    with pytest.raises(HardwareRuleViolation, match="outside the"):
        standin.gather_heads(cache, [0, 3], 0, 2, tiling=broken)


def test_staging_a_block_larger_than_ub_is_caught(standin):
    cache = random_cache((2, 128, 8, 128), torch.bfloat16, seed=5)  # 256 KiB per block
    tiling = standin.plan("block_transpose", 2, 128, 8, 128, 2, 1, 2)
    assert tiling.fullLoad == 0
    broken = copy_of(tiling)
    broken.fullLoad, broken.bufferNum, broken.bufferBytes = 1, 1, 128 * 8 * 128 * 2
    with pytest.raises(HardwareRuleViolation, match="unified buffer overflow"):
        standin.block_transpose(cache, [1], 2, tiling=broken)


def test_two_cores_transposing_the_same_block_in_place_is_a_race(standin):
    cache = random_cache((3, 16, 4, 64), torch.bfloat16, seed=6)
    tiling = standin.plan("block_transpose", 3, 16, 4, 64, 2, 2, 2)
    assert tiling.usedCores == 2
    with pytest.raises(HardwareRuleViolation, match="race"):
        standin.block_transpose(cache, [1, 1], 2, tiling=tiling)


def test_too_few_buffers_for_the_queue_is_caught(standin):
    cache = random_cache((2, 128, 2, 64), torch.bfloat16, seed=8)
    broken = copy_of(standin.plan("gather_heads", 2, 128, 2, 64, 2, 1, 0, 2))
    broken.bufferNum = 0
    with pytest.raises(HardwareRuleViolation, match="InitBuffer"):
        standin.gather_heads(cache, [0], 0, 2, tiling=broken)


def test_host_tiling_rejects_a_split_that_does_not_divide_the_heads(standin):
    with pytest.raises(TilingRejected, match="split"):
        standin.plan("block_transpose", 2, 16, 6, 64, 2, 1, 4)
