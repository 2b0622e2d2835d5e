"""Fast implementations of the KV layout ops for caches in host memory: one pass over the bytes where possible.

The ops only move bytes, so each tensor is viewed as the widest word that divides its rows: torch copies
16- or 8-byte words through strided views many times faster than 2-byte elements.
"""

from __future__ import annotations

import torch

_WORDS = (torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8)


def word_dtype(*row_bytes: int) -> torch.dtype:
    """The widest word whose size divides every given row length in bytes."""
    for dtype in _WORDS:
        size = torch.empty((), dtype=dtype).element_size()
        if all(length % size == 0 for length in row_bytes):
            return dtype
    raise AssertionError("int8 divides every length")


def as_words(tensor: torch.Tensor, word: torch.dtype) -> torch.Tensor:
    return tensor.view(torch.int8).view(word)


def _row_bytes(tensor: torch.Tensor) -> int:
    return tensor.shape[-1] * tensor.element_size()


def gather_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, head_count: int) -> torch.Tensor:
    word = word_dtype(_row_bytes(cache))
    packed = torch.index_select(as_words(cache, word).narrow(2, head_start, head_count), 0, ids)
    return packed.view(torch.int8).view(cache.dtype)


def scatter_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, packed: torch.Tensor) -> None:
    word = word_dtype(_row_bytes(cache))
    as_words(cache, word).narrow(2, head_start, packed.shape[2]).index_copy_(0, ids, as_words(packed, word))


def block_transpose(cache: torch.Tensor, ids: torch.Tensor, split: int) -> None:
    # One block at a time through a block-sized scratch buffer that stays in cache between the two copies.
    _, block_size, heads, _ = cache.shape
    words = as_words(cache, word_dtype(_row_bytes(cache)))
    scratch = torch.empty(words.shape[1:], dtype=words.dtype)
    from_senders = scratch.view(split, block_size, heads // split, -1).transpose(0, 1)
    for block in ids.tolist():
        target = words[block]
        scratch.copy_(target)
        target.view(block_size, split, heads // split, -1).copy_(from_senders)


def mla_split(fused: torch.Tensor, ids: torch.Tensor, rope_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    lora = fused.shape[2] - rope_dim
    size = fused.element_size()
    words = as_words(fused, word_dtype(lora * size, rope_dim * size))
    split_at = lora * words.shape[2] // fused.shape[2]
    nope = torch.index_select(words.narrow(2, 0, split_at), 0, ids)
    rope = torch.index_select(words.narrow(2, split_at, words.shape[2] - split_at), 0, ids)
    return (nope.view(torch.int8).view(fused.dtype).unsqueeze(2),
            rope.view(torch.int8).view(fused.dtype).unsqueeze(2))


def mla_fuse(nope: torch.Tensor, rope: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    lora, rope_dim = nope.shape[3], rope.shape[3]
    word = word_dtype(_row_bytes(nope), _row_bytes(rope))
    fused = torch.empty((ids.numel(), nope.shape[1], lora + rope_dim), dtype=nope.dtype)
    fused_words, nope_words, rope_words = as_words(fused, word), as_words(nope, word), as_words(rope, word)
    split_at = nope_words.shape[3]
    fused_words[:, :, :split_at].copy_(torch.index_select(nope_words, 0, ids).squeeze(2))
    fused_words[:, :, split_at:].copy_(torch.index_select(rope_words, 0, ids).squeeze(2))
    return fused


def nd_to_nz(cache: torch.Tensor, ids: torch.Tensor, c0: int) -> torch.Tensor:
    _, block_size, heads, head_dim = cache.shape
    fractals = heads * head_dim // c0
    nz = torch.empty((ids.numel(), fractals, block_size, c0), dtype=cache.dtype)
    word = word_dtype(c0 * cache.element_size())
    nz_words, nd_words = as_words(nz, word), as_words(cache, word).view(cache.shape[0], block_size, fractals, -1)
    for index, block in enumerate(ids.tolist()):
        nz_words[index].copy_(nd_words[block].transpose(0, 1))
    return nz


def nz_to_nd(nz_cache: torch.Tensor, ids: torch.Tensor, head_dim: int) -> torch.Tensor:
    _, fractals, block_size, c0 = nz_cache.shape
    heads = fractals * c0 // head_dim
    nd = torch.empty((ids.numel(), block_size, heads, head_dim), dtype=nz_cache.dtype)
    word = word_dtype(c0 * nz_cache.element_size())
    nd_words = as_words(nd, word).view(ids.numel(), block_size, fractals, -1)
    nz_words = as_words(nz_cache, word)
    for index, block in enumerate(ids.tolist()):
        nd_words[index].copy_(nz_words[block].transpose(0, 1))
    return nd
