"""Fast implementations of the KV layout ops for caches in host memory: one pass over the bytes where possible.

The ops only move bytes, so each tensor is viewed as the widest word that divides its rows: torch copies
16- or 8-byte words through strided views many times faster than 2-byte elements. The ops that reorder rows inside a
block (ND <-> NZ, the in-place transpose, the MLA fuse) go block by block through numpy, and spread the blocks over
torch's intra-op threads: numpy releases the GIL while it copies, and one thread cannot keep up with memcpy on
strided rows of a cache that does not fit in the CPU's cache. The ops that return a tensor take `out`: a new tensor's
first touch costs page faults that cost as much as the copy itself once it is past a few MiB.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import torch

_WORDS = (torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8)
# Below this many bytes per call, handing blocks to other threads costs more than it saves.
_SPLIT_BYTES = 1 << 20


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


@functools.cache
def _pool(pid: int, threads: int) -> ThreadPoolExecutor:
    # keyed by pid: a pool made before a fork has no threads in the child
    return ThreadPoolExecutor(threads - 1, thread_name_prefix="ascend-pd-kv")


def _for_blocks(count: int, block_bytes: int, move: Callable[[int, int], None]) -> None:
    """Run move(start, stop) over blocks [0, count), in one contiguous share per torch intra-op thread."""
    threads = min(torch.get_num_threads(), count)
    if threads < 2 or count * block_bytes < _SPLIT_BYTES:
        move(0, count)
        return
    bounds = [count * share // threads for share in range(threads + 1)]
    others = [_pool(os.getpid(), threads).submit(move, bounds[share], bounds[share + 1])
              for share in range(1, threads)]
    try:
        move(bounds[0], bounds[1])
    finally:
        wait(others)  # never return while another thread still writes the caller's tensors
    for future in others:
        future.result()


def _bytes(tensor: torch.Tensor, blocks: int) -> np.ndarray:
    """A contiguous tensor as [blocks, bytes] of uint8, sharing its memory.

    numpy copies runs of contiguous bytes with memcpy and releases the GIL for calls over a few hundred elements,
    so bytes (not wider items) keep a block's copy fast and let the threads run at once."""
    return tensor.view(torch.uint8).numpy().reshape(blocks, -1)


def _items(tensor: torch.Tensor, blocks: int, item_bytes: int) -> np.ndarray:
    """A contiguous tensor as [blocks, items] of item_bytes-wide byte strings, sharing its memory."""
    return _bytes(tensor, blocks).view(np.dtype(f"V{item_bytes}"))


def _new_or(out: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.empty(shape, dtype=like.dtype) if out is None else out


def gather_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, head_count: int,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    packed = _new_or(out, (ids.numel(), cache.shape[1], head_count, cache.shape[3]), cache)
    word = word_dtype(_row_bytes(cache))
    torch.index_select(as_words(cache, word).narrow(2, head_start, head_count), 0, ids, out=as_words(packed, word))
    return packed


def scatter_heads(cache: torch.Tensor, ids: torch.Tensor, head_start: int, packed: torch.Tensor) -> None:
    word = word_dtype(_row_bytes(cache))
    as_words(cache, word).narrow(2, head_start, packed.shape[2]).index_copy_(0, ids, as_words(packed, word))


def block_transpose(cache: torch.Tensor, ids: torch.Tensor, split: int) -> None:
    # Each block goes through a block-sized scratch buffer that stays in cache between the two copies.
    num_blocks, block_size, heads, _ = cache.shape
    piece = heads // split * _row_bytes(cache)  # one sender's heads of one token
    cache_blocks = _bytes(cache, num_blocks)
    blocks = ids.tolist()

    def move(start: int, stop: int) -> None:
        scratch = np.empty(cache_blocks.shape[1], dtype=np.uint8)
        from_senders = scratch.reshape(split, block_size, piece).transpose(1, 0, 2)
        for block in blocks[start:stop]:
            np.copyto(scratch, cache_blocks[block])
            np.copyto(cache_blocks[block].reshape(block_size, split, piece), from_senders)

    _for_blocks(len(blocks), cache_blocks.shape[1], move)


def mla_split(fused: torch.Tensor, ids: torch.Tensor, rope_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    lora = fused.shape[2] - rope_dim
    size = fused.element_size()
    words = as_words(fused, word_dtype(lora * size, rope_dim * size))
    split_at = lora * words.shape[2] // fused.shape[2]
    nope = torch.index_select(words.narrow(2, 0, split_at), 0, ids)
    rope = torch.index_select(words.narrow(2, split_at, words.shape[2] - split_at), 0, ids)
    return (nope.view(torch.int8).view(fused.dtype).unsqueeze(2),
            rope.view(torch.int8).view(fused.dtype).unsqueeze(2))


def mla_fuse(nope: torch.Tensor, rope: torch.Tensor, ids: torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
    num_blocks, block_size = nope.shape[:2]
    fused = _new_or(out, (ids.numel(), block_size, nope.shape[3] + rope.shape[3]), nope)
    fused_rows = _bytes(fused, ids.numel()).reshape(ids.numel(), block_size, -1)
    nope_rows = _bytes(nope, num_blocks).reshape(num_blocks, block_size, -1)
    rope_rows = _bytes(rope, num_blocks).reshape(num_blocks, block_size, -1)
    parts = ((nope_rows, fused_rows[..., :nope_rows.shape[2]]), (rope_rows, fused_rows[..., nope_rows.shape[2]:]))
    blocks = ids.tolist()

    def move(start: int, stop: int) -> None:
        for index in range(start, stop):
            for source, target in parts:
                np.copyto(target[index], source[blocks[index]])

    _for_blocks(len(blocks), fused_rows[0].nbytes, move)
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


def _move_blocks(source: np.ndarray, ids: torch.Tensor, order: np.ndarray, target: np.ndarray) -> None:
    blocks = ids.tolist()

    def move(start: int, stop: int) -> None:
        # mode="clip" writes straight into target (the default mode buffers the output to undo a partial take on a
        # bad index) and clamps with a compare where "wrap" divides; the order only holds valid indices
        for index in range(start, stop):
            np.take(source[blocks[index]], order, out=target[index], mode="clip")

    _for_blocks(len(blocks), source.itemsize * source.shape[1], move)


def nd_to_nz(cache: torch.Tensor, ids: torch.Tensor, c0: int, out: torch.Tensor | None = None) -> torch.Tensor:
    num_blocks, block_size, heads, head_dim = cache.shape
    fractals = heads * head_dim // c0
    nz = _new_or(out, (ids.numel(), fractals, block_size, c0), cache)
    fractal_bytes = c0 * cache.element_size()
    _move_blocks(_items(cache, num_blocks, fractal_bytes), ids, _nz_order(block_size, fractals),
                 _items(nz, ids.numel(), fractal_bytes))
    return nz


def nz_to_nd(nz_cache: torch.Tensor, ids: torch.Tensor, head_dim: int,
             out: torch.Tensor | None = None) -> torch.Tensor:
    num_blocks, fractals, block_size, c0 = nz_cache.shape
    heads = fractals * c0 // head_dim
    nd = _new_or(out, (ids.numel(), block_size, heads, head_dim), nz_cache)
    fractal_bytes = c0 * nz_cache.element_size()
    _move_blocks(_items(nz_cache, num_blocks, fractal_bytes), ids, _nd_order(block_size, fractals),
                 _items(nd, ids.numel(), fractal_bytes))
    return nd
