"""Each node's network after the operator's overrides."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.hardware import Node


@dataclass(frozen=True)
class NodeNetwork:
    """The host address and NIC a node's processes use for HCCL, Gloo and the KV side channel."""

    host_ip: str
    interface: str


def node_network(node: Node, interface: str | None, node_ips: dict[str, str]) -> NodeNetwork:
    """The cluster config's values, unless the operator overrode the interface (all nodes) or this node's IP."""
    return NodeNetwork(host_ip=node_ips.get(node.name, node.host_ip), interface=interface or node.interface)
