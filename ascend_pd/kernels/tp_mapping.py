"""Which KV heads each destination TP rank must read from which source TP ranks (pure Python, no torch).

Head ownership follows vLLM's QKVParallelLinear: with K KV heads on T ranks, rank r holds heads
[r*K//T, r*K//T + max(1, K//T)); when T > K, T//K consecutive ranks hold copies of one head. Only the
min(T, K) distinct shards carry different data, so a head held by several source ranks (replicas) is read
from one of them, chosen per request. An MLA latent cache has no head dimension and is identical on every
rank: it behaves as one head replicated on all source ranks.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ascend_pd.errors import InputError


@dataclass(frozen=True)
class HeadRange:
    """Global KV heads [start, start + count)."""

    start: int
    count: int

    @property
    def stop(self) -> int:
        return self.start + self.count


@dataclass(frozen=True)
class SourceRead:
    """One read a destination rank makes: head_count heads from one source rank's cache into its own."""

    src_rank: int
    src_head_start: int  # first head inside the source rank's local cache
    dst_head_start: int  # first head inside the destination rank's local cache
    head_count: int
    src_heads_per_rank: int

    @property
    def whole_source_block(self) -> bool:
        """True when the read takes every head the source holds, so whole blocks can move unchanged."""
        return self.src_head_start == 0 and self.head_count == self.src_heads_per_rank


@dataclass(frozen=True)
class ReadGroup:
    """Heads of a destination rank that sit in one source shard; any rank in `replicas` can provide them."""

    heads: HeadRange
    src_head_start: int
    dst_head_start: int
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class DestinationPlan:
    """Everything one destination rank reads, before a replica is picked for a request."""

    dst_rank: int
    heads: HeadRange
    groups: tuple[ReadGroup, ...]
    src_heads_per_rank: int

    def reads(self, request_id: str) -> tuple[SourceRead, ...]:
        """The reads for one request: one replica per group, the same for the same request every time.

        The replica index moves with the request, the destination rank and the group, so one request's
        destination ranks read different replicas and successive requests rotate over all of them.
        """
        request_hash = zlib.crc32(request_id.encode())
        picked = []
        for group_index, group in enumerate(self.groups):
            replica = group.replicas[(request_hash + self.dst_rank + group_index) % len(group.replicas)]
            picked.append(SourceRead(src_rank=replica, src_head_start=group.src_head_start,
                                     dst_head_start=group.dst_head_start, head_count=group.heads.count,
                                     src_heads_per_rank=self.src_heads_per_rank))
        return tuple(picked)


@dataclass(frozen=True)
class TpTransferPlan:
    """The mapping between a source (prefill) and a destination (decode) tensor-parallel layout."""

    num_kv_heads: int
    src_tp: int
    dst_tp: int
    is_mla: bool
    destinations: tuple[DestinationPlan, ...]

    def reads(self, dst_rank: int, request_id: str) -> tuple[SourceRead, ...]:
        return self.destinations[dst_rank].reads(request_id)


def heads_per_rank(num_kv_heads: int, tp: int) -> int:
    return max(1, num_kv_heads // tp)


def rank_heads(num_kv_heads: int, tp: int, rank: int) -> HeadRange:
    """The global heads a rank holds (vLLM's QKVParallelLinear rule)."""
    return HeadRange(rank * num_kv_heads // tp, heads_per_rank(num_kv_heads, tp))


def _check_layout(num_kv_heads: int, tp: int, field: str) -> None:
    if tp < 1:
        raise InputError(f"tensor-parallel size must be at least 1, got {tp}", field=field,
                         fix="pass the instance's tp")
    divides = num_kv_heads % tp == 0 if tp <= num_kv_heads else tp % num_kv_heads == 0
    if not divides:
        raise InputError(f"tp {tp} and {num_kv_heads} KV heads: one must divide the other", field=field,
                         fix="choose a tp that divides the KV head count or is a multiple of it")


def plan_tp_transfer(num_kv_heads: int, src_tp: int, dst_tp: int, is_mla: bool) -> TpTransferPlan:
    """For each destination rank, the source ranks and head ranges it needs (src TP above, below or equal)."""
    if is_mla:
        num_kv_heads = 1  # the latent cache: one "head" that every rank holds in full
    elif num_kv_heads < 1:
        raise InputError(f"num_kv_heads must be at least 1, got {num_kv_heads}", field="num_kv_heads",
                         fix="pass the model's KV head count")
    _check_layout(num_kv_heads, src_tp, "src_tp")
    _check_layout(num_kv_heads, dst_tp, "dst_tp")
    src_per_rank = heads_per_rank(num_kv_heads, src_tp)
    shards: dict[int, list[int]] = {}  # first head of a source shard -> the source ranks holding it
    for src_rank in range(src_tp):
        shards.setdefault(rank_heads(num_kv_heads, src_tp, src_rank).start, []).append(src_rank)
    destinations = []
    for dst_rank in range(dst_tp):
        wanted = rank_heads(num_kv_heads, dst_tp, dst_rank)
        groups = []
        for shard_start, replicas in sorted(shards.items()):
            start = max(wanted.start, shard_start)
            stop = min(wanted.stop, shard_start + src_per_rank)
            if start < stop:
                groups.append(ReadGroup(heads=HeadRange(start, stop - start), src_head_start=start - shard_start,
                                        dst_head_start=start - wanted.start, replicas=tuple(replicas)))
        destinations.append(DestinationPlan(dst_rank=dst_rank, heads=wanted, groups=tuple(groups),
                                            src_heads_per_rank=src_per_rank))
    return TpTransferPlan(num_kv_heads=num_kv_heads, src_tp=src_tp, dst_tp=dst_tp, is_mla=is_mla,
                          destinations=tuple(destinations))
