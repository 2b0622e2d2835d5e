"""Fast implementations of the KV layout ops for caches in host memory: one pass over the bytes where possible.

The ops only move bytes, so each tensor is viewed as the widest word that divides its rows: torch copies
16- or 8-byte words through strided views many times faster than 2-byte elements. ND <-> NZ moves 32-byte fractal
rows, wider than any torch dtype, so it goes through numpy's take on 32-byte void items instead.
"""

from __future__ import annotations

import functools

import numpy as np
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


@functools.lru_cache(maxsize=16)
def _nz_order(block_size: int, fractals: int) -> np.ndarray:
    """For each 32-byte row of an NZ block [F, block_size], the index of the same row in the ND block [block_size, F]:
    one fractal column after another."""
    return (np.arange(block_size).reshape(1, -1) * fractals + np.arange(fractals).reshape(-1, 1)).reshape(-1)


@functools.lru_cache(maxsize=16)
def _nd_order(block_size: int, fractals: int) -> np.ndarray:
    """The inverse of _nz_order: for each 32-byte row of an ND block, its index in the NZ block."""
    return np.argsort(_nz_order(block_size, fractals))


def _fractal_rows(tensor: torch.Tensor) -> np.ndarray:
    """A contiguous tensor's blocks as rows of 32-byte items, sharing its memory."""
    return tensor.view(torch.uint8).numpy().reshape(tensor.shape[0], -1).view(np.dtype("V32"))


def _move_blocks(source: np.ndarray, ids: torch.Tensor, order: np.ndarray, target: np.ndarray) -> None:
    # mode="wrap" skips the copy of the output that the default mode makes to undo a partial take on a bad index;
    # the order only holds valid indices
    for index, block in enumerate(ids.tolist()):
        np.take(source[block], order, out=target[index], mode="wrap")


def nd_to_nz(cache: torch.Tensor, ids: torch.Tensor, c0: int) -> torch.Tensor:
    _, block_size, heads, head_dim = cache.shape
    fractals = heads * head_dim // c0
    nz = torch.empty((ids.numel(), fractals, block_size, c0), dtype=cache.dtype)
    _move_blocks(_fractal_rows(cache), ids, _nz_order(block_size, fractals), _fractal_rows(nz))
    return nz


def nz_to_nd(nz_cache: torch.Tensor, ids: torch.Tensor, head_dim: int) -> torch.Tensor:
    _, fractals, block_size, c0 = nz_cache.shape
    heads = fractals * c0 // head_dim
    nd = torch.empty((ids.numel(), block_size, heads, head_dim), dtype=nz_cache.dtype)
    _move_blocks(_fractal_rows(nz_cache), ids, _nd_order(block_size, fractals), _fractal_rows(nd))
    return nd
