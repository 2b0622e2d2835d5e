"""Torch references of the KV layout ops: written for clarity, one block at a time; they define each op's meaning."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def gather_heads(cache: torch.Tensor, block_ids: Sequence[int], head_start: int, head_count: int) -> torch.Tensor:
    """[num_blocks, bs, H, D] -> [n, bs, head_count, D]: heads [head_start, +head_count) of the listed blocks."""
    heads = slice(head_start, head_start + head_count)
    return torch.stack([cache[block, :, heads, :] for block in block_ids]).contiguous()


def scatter_heads(cache: torch.Tensor, block_ids: Sequence[int], head_start: int, packed: torch.Tensor) -> None:
    """Write packed [n, bs, hc, D] into heads [head_start, +hc) of the listed blocks."""
    heads = slice(head_start, head_start + packed.shape[2])
    for index, block in enumerate(block_ids):
        cache[block, :, heads, :] = packed[index]


def block_transpose(cache: torch.Tensor, block_ids: Sequence[int], split: int) -> None:
    """In place, per block: [split, bs, H/split, D] (whole blocks of `split` senders) -> [bs, H, D]."""
    _, block_size, heads, head_dim = cache.shape
    for block in block_ids:
        from_senders = cache[block].reshape(split, block_size, heads // split, head_dim)
        tokens_first = from_senders.permute(1, 0, 2, 3).reshape(block_size, heads, head_dim)
        cache[block] = tokens_first.clone()


def mla_split(fused: torch.Tensor, block_ids: Sequence[int], rope_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused [nb, bs, lora + rope] -> nope [n, bs, 1, lora] and rope [n, bs, 1, rope] for the listed blocks."""
    lora = fused.shape[2] - rope_dim
    nope = torch.stack([fused[block, :, :lora] for block in block_ids]).unsqueeze(2).contiguous()
    rope = torch.stack([fused[block, :, lora:] for block in block_ids]).unsqueeze(2).contiguous()
    return nope, rope


def mla_fuse(nope: torch.Tensor, rope: torch.Tensor, block_ids: Sequence[int]) -> torch.Tensor:
    """nope [nb, bs, 1, lora] and rope [nb, bs, 1, rope] -> fused [n, bs, lora + rope] for the listed blocks."""
    return torch.stack([torch.cat([nope[block, :, 0, :], rope[block, :, 0, :]], dim=-1) for block in block_ids])


def nd_to_nz(cache: torch.Tensor, block_ids: Sequence[int], c0: int) -> torch.Tensor:
    """[nb, bs, H, D] -> FRACTAL_NZ [n, H*D/c0, bs, c0]: nz[f, t, c] = nd[t, f*c0 + c] for each listed block."""
    _, block_size, heads, head_dim = cache.shape
    blocks = []
    for block in block_ids:
        rows = cache[block].reshape(block_size, heads * head_dim // c0, c0)  # [token, fractal column, c]
        blocks.append(rows.permute(1, 0, 2))
    return torch.stack(blocks).contiguous()


def nz_to_nd(nz_cache: torch.Tensor, block_ids: Sequence[int], head_dim: int) -> torch.Tensor:
    """FRACTAL_NZ [nb, F, bs, c0] -> [n, bs, F*c0/head_dim, head_dim] for the listed blocks."""
    _, fractals, block_size, c0 = nz_cache.shape
    blocks = []
    for block in block_ids:
        rows = nz_cache[block].permute(1, 0, 2).reshape(block_size, fractals * c0 // head_dim, head_dim)
        blocks.append(rows)
    return torch.stack(blocks).contiguous()
