"""The host checks every launch goes through (kv::CheckLaunch, called by the NPU binding and by the CPU bridge):
a block id the kernel would turn into a wild GM address, or more cores than the device has, is a clear error
before anything runs."""

from __future__ import annotations

import ctypes

import pytest
import torch

from ascendc_cpu import HardwareRuleViolation, KvTiling, StandIn, TilingRejected
from kv_strategies import random_cache

CACHE = (4, 16, 2, 64)


def run_op(standin: StandIn, op: str, ids: list[int]) -> None:
    cache = random_cache(CACHE, torch.bfloat16, seed=1)
    if op == "gather_heads":
        standin.gather_heads(cache, ids, 0, 2)
    elif op == "scatter_heads":
        standin.scatter_heads(cache, ids, 0, random_cache((len(ids), 16, 2, 64), torch.bfloat16, seed=2))
    elif op == "block_transpose":
        standin.block_transpose(cache, ids, 2)
    elif op == "mla_fuse":
        standin.mla_fuse(cache[:, :, :1], cache[:, :, 1:], ids)
    elif op == "nd_to_nz":
        standin.nd_to_nz(cache, ids)
    else:
        raise AssertionError(op)


@pytest.mark.parametrize("op", ["gather_heads", "scatter_heads", "block_transpose", "mla_fuse", "nd_to_nz"])
@pytest.mark.parametrize("bad", [-1, 4, 2**31 - 1])
def test_a_block_id_outside_the_cache_is_refused_before_the_launch(standin, op, bad):
    with pytest.raises(TilingRejected, match=f"block id {bad} at position 1 is outside the 4 blocks"):
        run_op(standin, op, [0, bad])
    run_op(standin, op, [0, 3])  # the same launch with ids inside the cache runs


def test_without_the_host_check_an_id_past_the_cache_becomes_a_wild_global_address(standin):
    cache = random_cache(CACHE, torch.bfloat16, seed=3)
    tiling = standin.plan("gather_heads", *CACHE, 2, 2, 0, 2)
    unchecked = KvTiling()
    ctypes.pointer(unchecked)[0] = tiling
    unchecked.idBlocks = 2**63  # lets the id through the host check; only the stand-in stands in the way
    with pytest.raises(HardwareRuleViolation, match="outside the"):
        standin.gather_heads(cache, [0, 1000], 0, 2, tiling=unchecked)


def test_a_launch_on_more_cores_than_the_device_has_is_refused(standin_library):
    cache = random_cache(CACHE, torch.bfloat16, seed=4)
    tiling = StandIn(standin_library, vector_cores=4).plan("gather_heads", *CACHE, 2, 4, 0, 2)
    assert tiling.usedCores == 4
    with pytest.raises(TilingRejected, match="needs 4 cores but the device has 2 vector cores"):
        StandIn(standin_library, vector_cores=2).gather_heads(cache, [0, 1, 2, 3], 0, 2, tiling=tiling)
