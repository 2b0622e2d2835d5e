"""Throughput of the CPU KV layout ops: GB/s moved and the ratio to a memcpy of the same bytes, same run.

Two baselines, sampled in turn with the op: a memcpy into a buffer that already exists, and a copy into a new tensor
(torch.empty, then memcpy). The second is the like-for-like one for the ops that return a new tensor: a fresh
buffer's first touch costs page faults that no layout choice can avoid (on the development VM it takes a 9 MiB copy
from 0.56 ms to 0.96 ms). The target is 0.7 or more of the like-for-like baseline for every op; the last line names
the ops below it.

Run: python tools/bench_kernels.py [--blocks 64 --blocks 512 --block-size 128 --heads 8 --head-dim 128 --repeats 30]
"""

from __future__ import annotations

import ctypes
import statistics
import time

import click
import torch

import ascend_pd.kernels as kernels

TARGET_RATIO = 0.7


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def paired_medians(run, num_bytes: int, repeats: int) -> tuple[float, float, float]:
    """Median seconds of the op, of a memcpy into an existing buffer and of a copy into a new tensor, in turn.

    Taking turns puts all three under the same load and cache state; the memcpy baseline alone moves by 3x between
    runs.
    """
    source = torch.randint(0, 255, (num_bytes,), dtype=torch.uint8)
    target = torch.empty_like(source)

    def memcpy() -> None:
        ctypes.memmove(target.data_ptr(), source.data_ptr(), num_bytes)

    def copy_to_new() -> torch.Tensor:
        fresh = torch.empty_like(source)
        ctypes.memmove(fresh.data_ptr(), source.data_ptr(), num_bytes)
        return fresh

    steps = (run, memcpy, copy_to_new)
    samples: list[list[float]] = [[] for _ in steps]
    for step in steps:  # warm caches and allocator
        step()
    for repeat in range(repeats):
        for turn in range(len(steps)):  # each step goes first in turn: whichever runs after another finds it in cache
            index = (repeat + turn) % len(steps)
            samples[index].append(timed(steps[index]))
    return tuple(statistics.median(times) for times in samples)


def cases(blocks: int, block_size: int, heads: int, head_dim: int):
    """(name, bytes moved, callable, whether the op returns a new tensor) for each op on one layer's cache.

    Each op that can write into a given tensor runs both ways: into a new tensor and into an existing one (`out=`, a
    staging buffer the caller keeps)."""
    cache = torch.randn((blocks, block_size, heads, head_dim)).to(torch.bfloat16)
    ids = torch.randperm(blocks)
    half = heads // 2
    packed = kernels.gather_heads(cache, ids, half, half)
    nz = kernels.nd_to_nz(cache, ids)
    fused = torch.randn((blocks, block_size, 576)).to(torch.bfloat16)
    nope, rope = kernels.mla_split(fused, ids)
    nd = torch.empty_like(cache)
    producers = (
        (f"gather_heads ({half} of {heads} heads)", lambda **out: kernels.gather_heads(cache, ids, half, half, **out),
         packed),
        ("gather_heads (all heads)", lambda **out: kernels.gather_heads(cache, ids, 0, heads, **out), cache),
        ("nd_to_nz", lambda **out: kernels.nd_to_nz(cache, ids, **out), nz),
        ("nz_to_nd", lambda **out: kernels.nz_to_nd(nz, ids, head_dim, **out), nd),
        ("mla_fuse (512 + 64)", lambda **out: kernels.mla_fuse(nope, rope, ids, **out), fused),
    )
    for name, produce, like in producers:
        target = torch.empty_like(like)
        yield name, like.nbytes, produce, True
        yield f"{name} into out", like.nbytes, lambda produce=produce, target=target: produce(out=target), False
    yield (f"scatter_heads ({half} of {heads} heads)", packed.nbytes,
           lambda: kernels.scatter_heads(cache, ids, half, packed), False)
    yield "block_transpose (split 2)", cache.nbytes, lambda: kernels.block_transpose(cache, ids, 2), False
    yield "mla_split (512 + 64)", fused.nbytes, lambda: kernels.mla_split(fused, ids), True


@click.command()
@click.option("--blocks", "block_counts", multiple=True, type=int, default=(64, 512), show_default=True,
              help="Blocks per op call; repeat for more sizes. 64 such blocks fit in a 32 MiB L3, 512 do not.")
@click.option("--block-size", default=128, show_default=True, help="Tokens per block.")
@click.option("--heads", default=8, show_default=True, help="KV heads in the cache.")
@click.option("--head-dim", default=128, show_default=True, help="Elements per head (bf16).")
@click.option("--repeats", default=30, show_default=True, help="Timed runs per op; the median is reported.")
def main(block_counts: tuple[int, ...], block_size: int, heads: int, head_dim: int, repeats: int) -> None:
    """Print GB/s and the ratios to memcpy for every CPU KV layout op, at each cache size."""
    below = []
    for blocks in block_counts:
        below += [f"{name} ({blocks} blocks)" for name in table(blocks, block_size, heads, head_dim, repeats)]
    click.echo(f"below {TARGET_RATIO} of memcpy: {', '.join(below) if below else 'none'}")


def table(blocks: int, block_size: int, heads: int, head_dim: int, repeats: int) -> list[str]:
    """Print one cache size's table; return the ops below the target."""
    click.echo(f"cache [{blocks}, {block_size}, {heads}, {head_dim}] bf16, torch {torch.__version__}, "
               f"{torch.get_num_threads()} threads, median of {repeats}")
    click.echo("ratio: to a memcpy into an existing buffer; like-for-like: to a copy into a new tensor where the op "
               "returns one (*), else the same memcpy")
    click.echo(f"{'op':36} {'MiB':>5} {'ms':>7} {'GB/s':>6} {'memcpy GB/s':>12} {'ratio':>6} {'like-for-like':>14}")
    below = []
    for name, num_bytes, run, returns_new in cases(blocks, block_size, heads, head_dim):
        op_s, memcpy_s, copy_to_new_s = paired_medians(run, num_bytes, repeats)
        like_for_like = (copy_to_new_s if returns_new else memcpy_s) / op_s
        mark = "*" if returns_new else " "
        click.echo(f"{name:36} {num_bytes / 2**20:5.1f} {op_s * 1e3:7.3f} {num_bytes / op_s / 1e9:6.2f} "
                   f"{num_bytes / memcpy_s / 1e9:12.2f} {memcpy_s / op_s:6.2f} {like_for_like:13.2f}{mark}")
        if like_for_like < TARGET_RATIO:
            below.append(name)
    return below


if __name__ == "__main__":
    main()
