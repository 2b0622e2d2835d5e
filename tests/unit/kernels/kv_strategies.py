"""Hypothesis strategies and random caches shared by the kernel tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

DTYPES = [torch.bfloat16, torch.float16, torch.int8]
HEAD_DIMS = [64, 128, 192, 512, 576, 40]  # 40 x 2 bytes = 80: rows that are not 32-byte aligned


def random_cache(shape, dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, dtype=torch.int8, generator=generator)
    return torch.randn(shape, generator=generator).to(dtype)


@st.composite
def block_ids(draw, num_blocks: int, unique: bool, max_size: int = 5):
    """Odd block-id lists: any order, gaps, repeats where allowed."""
    ids = st.integers(0, num_blocks - 1)
    if unique:
        return draw(st.lists(ids, min_size=1, max_size=min(max_size, num_blocks), unique=True))
    return draw(st.lists(ids, min_size=1, max_size=max_size))
