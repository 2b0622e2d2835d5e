"""The public KV layout ops: check the arguments, then run the AscendC op on an NPU, else the fast host path.

A cache on an accelerator without the AscendC extension runs the torch reference there (correct, not fast).
"""

from __future__ import annotations

import torch

from ascend_pd.kernels import cpu, reference
from ascend_pd.kernels.checks import (BlockIds, block_index, check_cache, check_head_range, check_nz_shape, fail)
from ascend_pd.kernels.npu import use_ascendc

NHD = "[num_blocks, block_size, heads, head_dim]"
NZ = "[num_blocks, heads*head_dim/c0, block_size, c0]"


def _npu_ids(ids: torch.Tensor) -> torch.Tensor:
    return ids.to(torch.int32)  # the kernels read 32-bit block ids from global memory


def _host_path(tensor: torch.Tensor):
    return cpu if tensor.device.type == "cpu" else reference


def _check_out(out: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor) -> None:
    if out is None:
        return
    if (tuple(out.shape) != shape or out.dtype != like.dtype or out.device != like.device
            or not out.is_contiguous()):
        fail("out", f"{tuple(out.shape)} {out.dtype} on {out.device} is not a contiguous {shape} {like.dtype} tensor "
                    f"on {like.device}",
             "pass a contiguous tensor of the result's shape, the cache's dtype and device, or no out")


def _into(out: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    # where an op has no form that writes into out (the AscendC ops but gather_heads, the reference), one more copy
    return result if out is None else out.copy_(result)


def gather_heads(cache: torch.Tensor, block_ids: BlockIds, head_start: int, head_count: int,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack heads [head_start, head_start + head_count) of the listed blocks: [n, block_size, head_count, head_dim].

    With `out` (for example a view of a registered staging buffer) the packed blocks are written there; on an NPU
    that is one kernel, ordered on the stream like any other, instead of a kernel and a copy."""
    check_cache(cache, "cache", 4, NHD)
    check_head_range(cache.shape[2], head_start, head_count)
    ids = block_index(block_ids, cache.shape[0], cache.device, unique=False)
    _check_out(out, (ids.numel(), cache.shape[1], head_count, cache.shape[3]), cache)
    if use_ascendc(cache):
        if out is None:
            return torch.ops.ascend_pd.gather_heads(cache, _npu_ids(ids), head_start, head_count)
        torch.ops.ascend_pd.gather_heads_into(cache, _npu_ids(ids), head_start, head_count, out)
        return out
    if cache.device.type == "cpu":
        return cpu.gather_heads(cache, ids, head_start, head_count, out)
    return _into(out, reference.gather_heads(cache, ids, head_start, head_count))


def scatter_heads(cache: torch.Tensor, block_ids: BlockIds, head_start: int, packed: torch.Tensor) -> None:
    """Write a received head slice packed [n, block_size, head_count, head_dim] into the listed blocks, in place."""
    check_cache(cache, "cache", 4, NHD)
    check_cache(packed, "packed", 4, "[n, block_size, head_count, head_dim]")
    ids = block_index(block_ids, cache.shape[0], cache.device, unique=True)
    n, block_size, head_count, head_dim = packed.shape
    if (n, block_size, head_dim) != (ids.numel(), cache.shape[1], cache.shape[3]) or packed.dtype != cache.dtype:
        fail("packed", f"shape {tuple(packed.shape)} {packed.dtype} does not fit {ids.numel()} blocks of cache "
             f"{tuple(cache.shape)} {cache.dtype}", "pack one [block_size, head_count, head_dim] slice per block id")
    check_head_range(cache.shape[2], head_start, head_count)
    if use_ascendc(cache):
        torch.ops.ascend_pd.scatter_heads(cache, _npu_ids(ids), head_start, packed)
    else:
        _host_path(cache).scatter_heads(cache, ids, head_start, packed)


def block_transpose(cache: torch.Tensor, block_ids: BlockIds, split: int) -> None:
    """In place, per listed block: [split, block_size, heads/split, head_dim] -> [block_size, heads, head_dim]."""
    check_cache(cache, "cache", 4, NHD)
    if split < 1 or cache.shape[2] % split:
        fail("split", f"split {split} does not divide the cache's {cache.shape[2]} heads",
             "pass the number of sender ranks whose whole blocks were read into each local block")
    ids = block_index(block_ids, cache.shape[0], cache.device, unique=True)
    if split == 1:
        return
    if use_ascendc(cache):
        torch.ops.ascend_pd.block_transpose(cache, _npu_ids(ids), split)
    else:
        _host_path(cache).block_transpose(cache, ids, split)


def mla_split(fused: torch.Tensor, block_ids: BlockIds, rope_dim: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream fused MLA blocks [nb, bs, lora + rope] -> vllm-ascend nope [n, bs, 1, lora], rope [n, bs, 1, rope]."""
    check_cache(fused, "fused", 3, "[num_blocks, block_size, kv_lora_rank + rope_dim]")
    if not 0 < rope_dim < fused.shape[2]:
        fail("rope_dim", f"rope_dim {rope_dim} does not leave a latent part in width {fused.shape[2]}",
             "pass the model's qk_rope_head_dim (64 for DeepSeek)")
    ids = block_index(block_ids, fused.shape[0], fused.device, unique=False)
    if use_ascendc(fused):
        return tuple(torch.ops.ascend_pd.mla_split(fused, _npu_ids(ids), rope_dim))
    return _host_path(fused).mla_split(fused, ids, rope_dim)


def mla_fuse(nope: torch.Tensor, rope: torch.Tensor, block_ids: BlockIds,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """vllm-ascend nope [nb, bs, 1, lora] and rope [nb, bs, 1, rope] -> upstream fused [n, bs, lora + rope].

    With `out` the fused blocks are written there (on the host, with no buffer in between)."""
    check_cache(nope, "nope", 4, "[num_blocks, block_size, 1, kv_lora_rank]")
    check_cache(rope, "rope", 4, "[num_blocks, block_size, 1, rope_dim]")
    if nope.shape[:3] != rope.shape[:3] or nope.shape[2] != 1 or nope.dtype != rope.dtype:
        fail("rope", f"rope {tuple(rope.shape)} {rope.dtype} does not pair with nope {tuple(nope.shape)} {nope.dtype}",
             "pass one layer's nope and rope caches, both [num_blocks, block_size, 1, dim] of one dtype")
    ids = block_index(block_ids, nope.shape[0], nope.device, unique=False)
    _check_out(out, (ids.numel(), nope.shape[1], nope.shape[3] + rope.shape[3]), nope)
    if use_ascendc(nope):
        return _into(out, torch.ops.ascend_pd.mla_fuse(nope, rope, _npu_ids(ids)))
    if nope.device.type == "cpu":
        return cpu.mla_fuse(nope, rope, ids, out)
    return _into(out, reference.mla_fuse(nope, rope, ids))


def nd_to_nz(cache: torch.Tensor, block_ids: BlockIds, out: torch.Tensor | None = None) -> torch.Tensor:
    """NHD blocks -> FRACTAL_NZ [n, heads*head_dim/c0, block_size, c0] (c0 = 16 for 16-bit types, 32 for int8).

    With `out` the NZ blocks are written there (on the host, with no buffer in between)."""
    check_cache(cache, "cache", 4, NHD)
    _, block_size, heads, head_dim = cache.shape
    c0 = check_nz_shape(heads * head_dim, block_size, cache.dtype, "cache")
    ids = block_index(block_ids, cache.shape[0], cache.device, unique=False)
    _check_out(out, (ids.numel(), heads * head_dim // c0, block_size, c0), cache)
    if use_ascendc(cache):
        return _into(out, torch.ops.ascend_pd.nd_to_nz(cache, _npu_ids(ids)))
    if cache.device.type == "cpu":
        return cpu.nd_to_nz(cache, ids, c0, out)
    return _into(out, reference.nd_to_nz(cache, ids, c0))


def nz_to_nd(nz_cache: torch.Tensor, block_ids: BlockIds, head_dim: int,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """FRACTAL_NZ blocks [nb, F, block_size, c0] -> NHD [n, block_size, F*c0/head_dim, head_dim].

    With `out` the NHD blocks are written there (on the host, with no buffer in between)."""
    check_cache(nz_cache, "nz_cache", 4, NZ)
    _, fractals, block_size, c0 = nz_cache.shape
    expected_c0 = check_nz_shape(fractals * c0, block_size, nz_cache.dtype, "nz_cache")
    if c0 != expected_c0:
        fail("nz_cache", f"last dim {c0} is not the NZ fractal width {expected_c0} of {nz_cache.dtype}",
             "pass a cache viewed as [num_blocks, heads*head_dim/c0, block_size, c0]")
    if head_dim < 1 or (fractals * c0) % head_dim:
        fail("head_dim", f"head_dim {head_dim} does not divide heads*head_dim = {fractals * c0}",
             "pass the head_dim the cache was written with")
    ids = block_index(block_ids, nz_cache.shape[0], nz_cache.device, unique=False)
    _check_out(out, (ids.numel(), block_size, fractals * c0 // head_dim, head_dim), nz_cache)
    if use_ascendc(nz_cache):
        return _into(out, torch.ops.ascend_pd.nz_to_nd(nz_cache, _npu_ids(ids), head_dim))
    if nz_cache.device.type == "cpu":
        return cpu.nz_to_nd(nz_cache, ids, head_dim, out)
    return _into(out, reference.nz_to_nd(nz_cache, ids, head_dim))
