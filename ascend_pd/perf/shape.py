"""An instance's parallel shape and the link tiers its TP and EP groups use on a cluster."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.hardware import Cluster, LinkTier


@dataclass(frozen=True)
class Shape:
    """tp x pp devices per DP rank, dp ranks; ep is the expert-parallel group (1: experts shard over TP)."""

    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1

    @property
    def devices(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def rank_devices(self) -> int:
        return self.tp * self.pp

    def label(self) -> str:
        text = f"TP{self.tp}xDP{self.dp}"
        if self.ep > 1:
            text += f" EP{self.ep}"
        if self.pp > 1:
            text += f" PP{self.pp}"
        return text


def group_link(cluster: Cluster, size: int) -> LinkTier | None:
    """The tier a group of `size` devices packed as tightly as the topology allows must cross (None for one)."""
    if size <= 1:
        return None
    topology = cluster.topology
    if "package" in topology and size <= cluster.chip.dies_per_package:
        return cluster.links[topology["package"]]
    if size <= cluster.devices_per_node:
        return cluster.links[topology["node"]]
    if "superpod" in topology and cluster.superpods:
        if size <= cluster.superpod_device_count:
            return cluster.links[topology["superpod"]]
    return cluster.links[topology["cluster"]]


@dataclass(frozen=True)
class Links:
    tp: LinkTier | None
    ep: LinkTier | None

    @classmethod
    def on(cls, cluster: Cluster, shape: Shape) -> "Links":
        return cls(tp=group_link(cluster, shape.tp), ep=group_link(cluster, shape.ep if shape.ep > 1 else 1))
