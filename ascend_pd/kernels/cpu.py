"""Fast host implementations of the KV layout ops: one pass over the bytes where torch allows it."""

from __future__ import annotations

import torch


def gather_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, head_count: int) -> torch.Tensor:
    return torch.index_select(cache.narrow(2, head_start, head_count), 0, ids)


def scatter_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, packed: torch.Tensor) -> None:
    cache.narrow(2, head_start, packed.shape[2]).index_copy_(0, ids, packed)


def block_transpose(cache: torch.Tensor, ids: torch.Tensor, split: int) -> None:
    # One block at a time through a block-sized scratch buffer that stays in cache between the two copies.
    _, block_size, heads, head_dim = cache.shape
    scratch = torch.empty(cache.shape[1:], dtype=cache.dtype, device=cache.device)
    from_senders = scratch.view(split, block_size, heads // split, head_dim).transpose(0, 1)
    for block in ids.tolist():
        target = cache[block]
        scratch.copy_(target)
        target.view(block_size, split, heads // split, head_dim).copy_(from_senders)


def mla_split(fused: torch.Tensor, ids: torch.Tensor, rope_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    lora = fused.shape[2] - rope_dim
    nope = torch.index_select(fused.narrow(2, 0, lora), 0, ids)
    rope = torch.index_select(fused.narrow(2, lora, rope_dim), 0, ids)
    return nope.unsqueeze(2), rope.unsqueeze(2)


def mla_fuse(nope: torch.Tensor, rope: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    lora, rope_dim = nope.shape[3], rope.shape[3]
    fused = torch.empty((ids.numel(), nope.shape[1], lora + rope_dim), dtype=nope.dtype, device=nope.device)
    for index, block in enumerate(ids.tolist()):
        fused[index, :, :lora].copy_(nope[block, :, 0])
        fused[index, :, lora:].copy_(rope[block, :, 0])
    return fused


def nd_to_nz(cache: torch.Tensor, ids: torch.Tensor, c0: int) -> torch.Tensor:
    _, block_size, heads, head_dim = cache.shape
    fractals = heads * head_dim // c0
    nz = torch.empty((ids.numel(), fractals, block_size, c0), dtype=cache.dtype, device=cache.device)
    for index, block in enumerate(ids.tolist()):
        nz[index].copy_(cache[block].view(block_size, fractals, c0).transpose(0, 1))
    return nz


def nz_to_nd(nz_cache: torch.Tensor, ids: torch.Tensor, head_dim: int) -> torch.Tensor:
    _, fractals, block_size, c0 = nz_cache.shape
    heads = fractals * c0 // head_dim
    nd = torch.empty((ids.numel(), block_size, heads, head_dim), dtype=nz_cache.dtype, device=nz_cache.device)
    for index, block in enumerate(ids.tolist()):
        nd[index].view(block_size, fractals, c0).copy_(nz_cache[block].transpose(0, 1))
    return nd
