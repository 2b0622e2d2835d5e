"""Byte routes of one TP read: where a source rank's share of a block lands in the destination block (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.connector.messages import PlaneInfo
from ascend_pd.kernels.tp_mapping import SourceRead


class LayoutMismatch(Exception):
    """The two sides' caches cannot exchange blocks (different block size, head size, dtype or layer count)."""


@dataclass(frozen=True)
class Route:
    """One plane of one source read. Direct routes are byte ranges; staged ones need a head gather first."""

    src_rank: int
    src_offset: int  # bytes into a source block
    dst_offset: int  # bytes into a destination block
    length: int  # bytes per block
    staged: bool  # the source slice is strided (NHD, fewer heads than the source holds)
    head_start: int  # first source head of the slice
    head_count: int


@dataclass(frozen=True)
class Copy:
    """One block-level copy: `length` bytes from a source address to a destination address."""

    dst: int
    src: int
    length: int


def _head_bytes(plane: PlaneInfo) -> int:
    return plane.block_len // plane.num_heads


def check_compatible(src: list[PlaneInfo], dst: list[PlaneInfo], src_block_size: int, dst_block_size: int) -> None:
    """Raise LayoutMismatch with a clear reason when the two caches cannot be paired plane by plane."""
    if src_block_size != dst_block_size:
        raise LayoutMismatch(f"prefill block size {src_block_size} != decode block size {dst_block_size}: "
                             "both instances must run with the same --block-size")
    if len(src) != len(dst):
        raise LayoutMismatch(f"prefill has {len(src)} cache tensors, decode {len(dst)}: the instances must serve "
                             "the same model with the same attention backend")
    for index, (s, d) in enumerate(zip(src, dst)):
        if _head_bytes(s) != _head_bytes(d) or s.heads_outer != d.heads_outer:
            raise LayoutMismatch(f"cache tensor {index}: prefill has {_head_bytes(s)} bytes per head and block, "
                                 f"decode {_head_bytes(d)} (or a different layout): same model, dtype and "
                                 "kv-cache-dtype are needed on both sides")


def check_block_ids(block_ids: list[int], planes: list[PlaneInfo], owner: str) -> None:
    """Raise LayoutMismatch when a peer names a block its cache does not have: the engine would otherwise move
    memory outside the registered caches (a stale or corrupted kv_transfer_params)."""
    num_blocks = min(plane.num_blocks for plane in planes)
    bad = [b for b in block_ids if not 0 <= b < num_blocks]
    if bad:
        raise LayoutMismatch(f"{owner} block ids {bad[:4]} are outside its {num_blocks}-block cache")


def route(read: SourceRead, src: PlaneInfo, dst: PlaneInfo) -> Route:
    """The route of one plane for one read (heads of `read` counted in this plane's local heads)."""
    head_bytes = _head_bytes(src)
    whole = read.head_count == src.num_heads
    if whole or src.heads_outer:
        return Route(src_rank=read.src_rank, src_offset=read.src_head_start * head_bytes,
                     dst_offset=read.dst_head_start * head_bytes, length=read.head_count * head_bytes,
                     staged=False, head_start=read.src_head_start, head_count=read.head_count)
    return Route(src_rank=read.src_rank, src_offset=0, dst_offset=read.dst_head_start * head_bytes,
                 length=src.block_len, staged=True, head_start=read.src_head_start, head_count=read.head_count)


def transpose_split(reads: tuple[SourceRead, ...], dst: PlaneInfo, src_heads: int) -> int:
    """How many whole source blocks were stacked into each NHD destination block (1: no transpose needed).

    Whole source blocks of H/split heads land one after another, giving [split, bs, H/split, D]; the
    destination block must then be turned back into [bs, H, D].
    """
    if dst.heads_outer:
        return 1
    stacked = [r for r in reads if r.head_count == src_heads and r.head_count < dst.num_heads]
    return dst.num_heads // stacked[0].head_count if stacked else 1


def direct_copies(rt: Route, src: PlaneInfo, dst: PlaneInfo, src_blocks: list[int],
                  dst_blocks: list[int]) -> list[Copy]:
    """One copy per block pair for a direct route."""
    return [Copy(dst=dst.base_addr + db * dst.block_stride + rt.dst_offset,
                 src=src.base_addr + sb * src.block_stride + rt.src_offset, length=rt.length)
            for sb, db in zip(src_blocks, dst_blocks)]
