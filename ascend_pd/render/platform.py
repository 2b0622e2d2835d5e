"""Each node's network: its address (the deployment's view of the cluster) and the NIC, which --interface
overrides."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.hardware import Node


@dataclass(frozen=True)
class NodeNetwork:
    """The host address and NIC a node's processes use for HCCL, Gloo and the KV side channel."""

    host_ip: str
    interface: str


def node_network(node: Node, interface: str | None) -> NodeNetwork:
    """The node's address and NIC, unless the operator overrode the interface of every node."""
    return NodeNetwork(host_ip=node.host_ip, interface=interface or node.interface)
