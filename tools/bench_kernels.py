"""Throughput of the CPU KV layout ops: GB/s moved and the ratio to a plain memcpy of the same bytes, same run.

The target is a ratio of 0.7 or more for every op; the last line names the ops below it.

Run: python tools/bench_kernels.py [--blocks 64 --block-size 128 --heads 8 --head-dim 128 --repeats 30]
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


def paired_medians(run, num_bytes: int, repeats: int) -> tuple[float, float]:
    """Median seconds of the op and of a memcpy of the same bytes, sampled alternately.

    Alternating puts both under the same load and cache state; the memcpy baseline alone moves by 3x between runs.
    """
    source = torch.randint(0, 255, (num_bytes,), dtype=torch.uint8)
    target = torch.empty_like(source)

    def memcpy() -> None:
        ctypes.memmove(target.data_ptr(), source.data_ptr(), num_bytes)

    run()  # warm caches and allocator
    memcpy()
    op_samples, copy_samples = [], []
    for _ in range(repeats):
        op_samples.append(timed(run))
        copy_samples.append(timed(memcpy))
    return statistics.median(op_samples), statistics.median(copy_samples)


def cases(blocks: int, block_size: int, heads: int, head_dim: int):
    """(name, bytes moved, callable) for each op on one layer's cache."""
    cache = torch.randn((blocks, block_size, heads, head_dim)).to(torch.bfloat16)
    ids = torch.randperm(blocks)
    half = heads // 2
    packed = kernels.gather_heads(cache, ids, half, half)
    nbytes = cache.element_size()
    half_bytes = packed.numel() * nbytes
    yield f"gather_heads ({half} of {heads} heads)", half_bytes, lambda: kernels.gather_heads(cache, ids, half, half)
    yield (f"scatter_heads ({half} of {heads} heads)", half_bytes,
           lambda: kernels.scatter_heads(cache, ids, half, packed))
    yield "gather_heads (all heads)", cache.numel() * nbytes, lambda: kernels.gather_heads(cache, ids, 0, heads)
    yield "block_transpose (split 2)", cache.numel() * nbytes, lambda: kernels.block_transpose(cache, ids, 2)
    yield "nd_to_nz", cache.numel() * nbytes, lambda: kernels.nd_to_nz(cache, ids)
    nz = kernels.nd_to_nz(cache, ids)
    yield "nz_to_nd", cache.numel() * nbytes, lambda: kernels.nz_to_nd(nz, ids, head_dim)
    fused = torch.randn((blocks, block_size, 576)).to(torch.bfloat16)
    nope, rope = kernels.mla_split(fused, ids)
    yield "mla_split (512 + 64)", fused.numel() * nbytes, lambda: kernels.mla_split(fused, ids)
    yield "mla_fuse (512 + 64)", fused.numel() * nbytes, lambda: kernels.mla_fuse(nope, rope, torch.arange(blocks))


@click.command()
@click.option("--blocks", default=64, show_default=True, help="Blocks per op call.")
@click.option("--block-size", default=128, show_default=True, help="Tokens per block.")
@click.option("--heads", default=8, show_default=True, help="KV heads in the cache.")
@click.option("--head-dim", default=128, show_default=True, help="Elements per head (bf16).")
@click.option("--repeats", default=30, show_default=True, help="Timed runs per op; the median is reported.")
def main(blocks: int, block_size: int, heads: int, head_dim: int, repeats: int) -> None:
    """Print GB/s and the ratio to memcpy for every CPU KV layout op."""
    click.echo(f"cache [{blocks}, {block_size}, {heads}, {head_dim}] bf16, torch {torch.__version__}, "
               f"{torch.get_num_threads()} threads, median of {repeats}")
    click.echo(f"{'op':32} {'MiB':>7} {'ms':>8} {'GB/s':>7} {'memcpy GB/s':>12} {'ratio':>6}")
    below = []
    for name, num_bytes, run in cases(blocks, block_size, heads, head_dim):
        op_s, copy_s = paired_medians(run, num_bytes, repeats)
        click.echo(f"{name:32} {num_bytes / 2**20:7.1f} {op_s * 1e3:8.3f} {num_bytes / op_s / 1e9:7.2f} "
                   f"{num_bytes / copy_s / 1e9:12.2f} {copy_s / op_s:6.2f}")
        if copy_s / op_s < TARGET_RATIO:
            below.append(name)
    click.echo(f"below {TARGET_RATIO} of memcpy: {', '.join(below) if below else 'none'}")


if __name__ == "__main__":
    main()
