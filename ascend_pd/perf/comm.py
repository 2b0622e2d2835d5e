"""Alpha-beta times of the collectives an instance runs (TP all-reduce, EP all-to-all) and of P -> D KV transfer."""

from __future__ import annotations

import math

from ascend_pd.hardware import LinkTier


def all_reduce_time(nbytes: float, ranks: int, link: LinkTier | None) -> float:
    """Reduce-scatter plus all-gather of `nbytes` over `ranks` devices: ring on switched tiers, one hop on a full
    mesh (each device talks to every peer at the per-peer bandwidth at once)."""
    if ranks <= 1 or link is None:
        return 0.0
    if link.full_mesh:
        return 2 * (nbytes / ranks) / link.bandwidth + 2 * link.latency
    return 2 * (ranks - 1) / ranks * nbytes / link.bandwidth + 2 * (ranks - 1) * link.latency


def all_to_all_time(nbytes_per_device: float, ranks: int, link: LinkTier | None) -> float:
    """One dispatch or combine: each device sends the (ranks-1)/ranks of its bytes that leave it to the others,
    all at once, and the group synchronises in log2(ranks) rounds of the tier's latency."""
    if ranks <= 1 or link is None:
        return 0.0
    return (ranks - 1) / ranks * nbytes_per_device / link.bandwidth + math.log2(ranks) * link.latency


def transfer_time(nbytes: float, link: LinkTier) -> float:
    """Moving `nbytes` point to point over one device's share of `link`."""
    return nbytes / link.bandwidth + link.latency
