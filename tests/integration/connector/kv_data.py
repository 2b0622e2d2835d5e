"""Test KV data: a global cache per layer with random bits, and the head shard a TP rank holds (vLLM's rule)."""

from __future__ import annotations

import torch

LAYER = "model.layers.{}.self_attn.attn"


def layer_name(layer: int) -> str:
    return LAYER.format(layer)


def global_planes(spec: dict, layer: int) -> list[torch.Tensor]:
    """All KV heads of every block: GQA K and V [nb, bs, K, D]; MLA nope [nb, bs, 1, 512] and rope [.., 64]."""
    shapes = ([(spec["num_blocks"], spec["block_size"], 1, 512), (spec["num_blocks"], spec["block_size"], 1, 64)]
              if spec["is_mla"] else
              [(spec["num_blocks"], spec["block_size"], spec["num_kv_heads"], spec["head_dim"])] * 2)
    planes = []
    for index, shape in enumerate(shapes):
        generator = torch.Generator().manual_seed(1000 * layer + index)
        bits = torch.randint(-32768, 32768, shape, dtype=torch.int16, generator=generator)
        planes.append(bits.view(torch.bfloat16))
    return planes


def heads_of(num_kv_heads: int, tp_size: int, rank: int) -> slice:
    """QKVParallelLinear: rank r holds heads [r*K//T, + max(1, K//T))."""
    start = rank * num_kv_heads // tp_size
    return slice(start, start + max(1, num_kv_heads // tp_size))


def shard(plane: torch.Tensor, spec: dict, rank: int, tp_size: int) -> torch.Tensor:
    """The rank's part of a global plane, NHD, or heads-outer [nb, H, bs, D] when spec asks for it."""
    part = plane if spec["is_mla"] else plane[:, :, heads_of(spec["num_kv_heads"], tp_size, rank), :]
    if spec.get("heads_outer"):
        part = part.permute(0, 2, 1, 3)
    return part.contiguous()
