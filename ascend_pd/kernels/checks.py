"""Argument checks shared by every KV layout op: shapes, dtypes, block ids and alignment, with clear errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import torch

from ascend_pd.errors import InputError

KV_DTYPES = (torch.bfloat16, torch.float16, torch.int8)
FRACTAL_BYTES = 32  # one NZ fractal row: c0 elements of 32 bytes (16 for 16-bit types, 32 for int8)
FRACTAL_ROWS = 16  # an NZ fractal has 16 rows, so block_size must be a multiple of it

BlockIds = torch.Tensor | Sequence[int]


def fail(field: str, message: str, fix: str) -> NoReturn:
    raise InputError(message, field=field, fix=fix)


def check_cache(cache: torch.Tensor, field: str, ndim: int, layout: str) -> None:
    if not isinstance(cache, torch.Tensor):
        fail(field, f"expected a torch.Tensor, got {type(cache).__name__}", f"pass the {layout} cache tensor")
    if cache.dim() != ndim:
        fail(field, f"expected a {ndim}-D tensor {layout}, got shape {tuple(cache.shape)}",
             f"pass the per-layer cache shaped {layout}")
    if cache.dtype not in KV_DTYPES:
        fail(field, f"dtype {cache.dtype} is not a KV cache dtype", "use bfloat16, float16 or int8")
    if not cache.is_contiguous():
        fail(field, "the cache must be contiguous", "pass the cache tensor itself, not a strided view of it")


def block_index(block_ids: BlockIds, num_blocks: int, device: torch.device, *, unique: bool) -> torch.Tensor:
    """Block ids as an int64 tensor on `device`, checked to name existing (and, for writes, distinct) blocks."""
    ids = block_ids if isinstance(block_ids, torch.Tensor) else torch.as_tensor(list(block_ids), dtype=torch.int64)
    if ids.dim() != 1 or ids.dtype not in (torch.int32, torch.int64):
        fail("block_ids", f"expected a 1-D list of integer block ids, got {ids.dtype} shape {tuple(ids.shape)}",
             "pass the request's block ids as a list of ints or a 1-D int32/int64 tensor")
    ids = ids.to(device=device, dtype=torch.int64)
    if ids.numel():
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= num_blocks:
            bad = low if low < 0 else high
            fail("block_ids", f"block id {bad} is outside the cache's {num_blocks} blocks",
                 f"use block ids in 0..{num_blocks - 1}")
        if unique and torch.unique(ids).numel() != ids.numel():
            fail("block_ids", "a block id appears twice in an op that writes blocks",
                 "pass each destination block once")
    return ids


def check_head_range(num_heads: int, head_start: int, head_count: int) -> None:
    if head_count < 1 or head_start < 0 or head_start + head_count > num_heads:
        fail("head_start", f"heads [{head_start}, {head_start + head_count}) are not inside the cache's "
             f"{num_heads} heads", "take head_start and head_count from plan_tp_transfer")


def fractal_width(dtype: torch.dtype) -> int:
    """c0 of FRACTAL_NZ: the elements in 32 bytes (16 for bf16/fp16, 32 for int8)."""
    return FRACTAL_BYTES // torch.empty((), dtype=dtype).element_size()


def check_nz_shape(features: int, block_size: int, dtype: torch.dtype, field: str) -> int:
    c0 = fractal_width(dtype)
    if features % c0:
        fail(field, f"heads*head_dim = {features} is not a multiple of the NZ fractal width {c0} for {dtype}",
             "FRACTAL_NZ needs heads*head_dim divisible by 16 (bf16/fp16) or 32 (int8)")
    if block_size % FRACTAL_ROWS:
        fail(field, f"block_size {block_size} is not a multiple of {FRACTAL_ROWS}",
             "use a block size of 16, 32, 64 or 128 for an NZ cache")
    return c0
