"""How a worker's KV cache tensors look to the transfer code: one plane per registered tensor, in layer order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ascend_pd.connector.messages import PlaneInfo


@dataclass(frozen=True)
class CachePlane:
    """One cache tensor viewed as [num_blocks, a, b, c], with the addresses the peers need."""

    layer: str
    tensor: Any  # torch.Tensor, 4-D: [nb, bs, heads, dim] (NHD) or [nb, heads, bs, dim] (heads outer)
    info: PlaneInfo
    block_size: int


def _manager_blocks(layer: str, tensor, heads_outer: bool, block_size: int | None):
    """vLLM may split each block of its KV cache manager into smaller kernel blocks (the CPU MLA kernel takes 16
    tokens): view each run of adjacent kernel blocks as one, so block ids mean what the scheduler means."""
    kernel_block = tensor.shape[2] if heads_outer else tensor.shape[1]
    if block_size is None or block_size == kernel_block:
        return tensor
    ratio, rest = divmod(block_size, kernel_block)
    nb, a, b, c = tensor.shape
    if rest or nb % ratio:
        raise ValueError(f"layer {layer}: cache {tuple(tensor.shape)} has {kernel_block}-token blocks that do not "
                         f"tile vLLM's {block_size}-token blocks")
    if tensor.stride(0) != tensor[0].numel():
        raise ValueError(f"layer {layer}: the kernel blocks of cache {tuple(tensor.shape)} are not back to back")
    if not heads_outer:
        return tensor.view(nb // ratio, ratio * a, b, c)
    if a != 1:
        raise ValueError(f"layer {layer}: {kernel_block}-token kernel blocks inside {block_size}-token blocks with "
                         "several heads outermost are not supported; use a block size the attention kernel takes")
    return tensor.view(nb // ratio, 1, ratio * b, c)


def _plane(layer: str, tensor, heads_outer: bool, block_size: int | None) -> CachePlane:
    if tensor.dim() == 3:  # MLA latent cache [nb, bs, width]: one head that every rank holds
        tensor = tensor.unsqueeze(1 if heads_outer else 2)
    if tensor.dim() != 4:
        raise ValueError(f"layer {layer}: cannot read a KV cache of shape {tuple(tensor.shape)}; expected "
                         "[num_blocks, block_size, heads, head_dim], a (K, V) pair of those, [2, ...] of them, "
                         "or an MLA cache [num_blocks, block_size, width]")
    if not tensor[0].is_contiguous():
        raise ValueError(f"layer {layer}: the blocks of cache {tuple(tensor.shape)} are not contiguous in memory")
    tensor = _manager_blocks(layer, tensor, heads_outer, block_size)
    heads, block_size = (tensor.shape[1], tensor.shape[2]) if heads_outer else (tensor.shape[2], tensor.shape[1])
    element = tensor.element_size()
    info = PlaneInfo(base_addr=tensor.data_ptr(), num_blocks=tensor.shape[0],
                     block_stride=tensor.stride(0) * element, block_len=tensor[0].numel() * element,
                     num_heads=heads, heads_outer=heads_outer)
    return CachePlane(layer=layer, tensor=tensor, info=info, block_size=block_size)


def cache_planes(kv_caches: dict[str, Any], heads_outer: bool = False,
                 block_size: int | None = None) -> list[CachePlane]:
    """Split vLLM's per-layer caches into planes: a (K, V) tuple or a [2, ...] tensor gives two, MLA gives one.

    heads_outer says that a 4-D cache is [num_blocks, heads, block_size, dim] (vLLM's CPU attention layout,
    K and V side by side in dim) rather than NHD [num_blocks, block_size, heads, dim] (Ascend, upstream).
    block_size is the KV cache manager's (cache_config.block_size), when the tensors may use smaller kernel blocks.
    """
    planes = []
    for layer, cache in kv_caches.items():
        if isinstance(cache, (tuple, list)):
            parts = list(cache)
        elif cache.dim() == 5 and cache.shape[0] == 2:
            parts = [cache[0], cache[1]]
        else:
            parts = [cache]
        planes.extend(_plane(layer, part, heads_outer, block_size) for part in parts)
    if not planes:
        raise ValueError("no KV cache tensors to register")
    sizes = {plane.block_size for plane in planes}
    if len(sizes) != 1:
        raise ValueError(f"KV cache planes disagree on the block size: {sorted(sizes)}")
    return planes


# vllm-ascend merges two spans of one allocation when they lie this close (KVU/utils.py REGISTER_MERGE_GAP_BYTES).
MERGE_GAP_BYTES = 4096


def _span(tensor) -> tuple[int, int]:
    """(first byte, end) of the memory a tensor view covers, from its own data_ptr: not its storage's base, which
    for an aligned view into a padded allocation is the raw, unaligned start."""
    extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    start = tensor.data_ptr()
    return start, start + extent * tensor.element_size()


def registration_regions(planes: list[CachePlane]) -> list[tuple[int, int]]:
    """(address, bytes) to register: each plane's own span, merged with others of the same allocation that touch or
    lie within MERGE_GAP_BYTES, never across allocations.

    As vllm-ascend registers (KVU/utils.py collect_storage_merged_register_regions): it allocates K and V (MLA nope
    and rope) of a layer apart, each padded so the cache starts 2 MiB aligned; the storage base is the unaligned
    raw start, which HCCL is not given. Views of one buffer that holds several layers merge into one region, which
    keeps the count below HCCL's limit."""
    by_storage: dict[int, list[tuple[int, int]]] = {}
    for plane in planes:
        by_storage.setdefault(plane.tensor.untyped_storage().data_ptr(), []).append(_span(plane.tensor))
    return [region for spans in by_storage.values() for region in merge_spans(spans, MERGE_GAP_BYTES)]


def merge_spans(spans: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """(start, end) spans of one allocation as (address, bytes) regions: spans that overlap, touch or lie within
    `gap` bytes of each other become one region (the gap between them included)."""
    regions: list[tuple[int, int]] = []
    start, end = None, None
    for next_start, next_end in sorted(spans):
        if start is not None and next_start <= end + gap:
            end = max(end, next_end)
            continue
        if start is not None:
            regions.append((start, end - start))
        start, end = next_start, next_end
    if start is not None:
        regions.append((start, end - start))
    return regions
