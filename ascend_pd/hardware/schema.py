"""The cluster file format (superpod_configs/clusters/*.yaml), as pydantic models that reject unknown keys."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LinkLevel = Literal["package", "node", "superpod", "cluster"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(_Strict):
    """One link tier. Bandwidth is what one device can send on it, one direction."""

    bandwidth_gbytes_per_s: float = Field(gt=0)
    latency_us: float = Field(ge=0)
    tp_capable: bool = Field(description="whether a TP group may span devices joined only by this tier")
    full_mesh: bool = Field(False, description="point-to-point links to each peer (A2 HCCS), bandwidth per peer")
    description: str = ""


class NodeType(_Strict):
    chip: str
    devices: int = Field(gt=0, le=64)
    description: str = ""
    resource_name: str = Field("huawei.com/Ascend910", description="Kubernetes device resource of this node type")


class NodeSpec(_Strict):
    """One node as the site names and addresses it."""

    name: str = Field(min_length=1, description="the node's name, as its hostname or the site calls it")
    host_ip: IPv4Address = Field(description="the address other nodes and the proxy reach the node at")
    device_ip_start: IPv4Address | None = Field(
        None, description="device 0's RoCE address (`hccn_tool -i 0 -ip -g`); device d has this address plus d")
    device_ips: list[IPv4Address] | None = Field(
        None, min_length=1, description="each device's RoCE address, by device id, where they are not consecutive")
    interface: str | None = Field(None, description="the host NIC for HCCL and Gloo traffic (default: the group's)")

    @model_validator(mode="after")
    def _one_way_to_give_device_ips(self) -> "NodeSpec":
        if self.device_ip_start is not None and self.device_ips is not None:
            raise ValueError(f"node '{self.name}' gives both device_ip_start and device_ips: keep one")
        return self


# Keys that number generated nodes, and so mean nothing in a group that lists its nodes.
NUMBERING_KEYS = ("name_prefix", "host_ip_start", "device_ip_start")


class NodeGroup(_Strict):
    """Nodes of one type: either listed (`nodes`), or `count` nodes named `{name_prefix}{index:02d}` with addresses
    counted up from the starts."""

    type: str
    count: int | None = Field(None, gt=0, le=4096, description="how many nodes; with `nodes`, optional and checked")
    name_prefix: str | None = Field(None, min_length=1)
    superpod: int | None = Field(None, ge=0)
    host_ip_start: IPv4Address = IPv4Address("127.0.0.1")
    device_ip_start: IPv4Address | None = None
    interface: str = Field("eth0", description="the host NIC for HCCL and Gloo traffic")
    nodes: list[NodeSpec] | None = Field(None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _listed_or_numbered(self) -> "NodeGroup":
        if self.nodes is None:
            missing = [key for key in ("count", "name_prefix") if getattr(self, key) is None]
            if missing:
                raise ValueError(f"a node group needs {' and '.join(missing)}, or a `nodes` list naming each node")
            return self
        numbering = [key for key in NUMBERING_KEYS if key in self.model_fields_set]
        if numbering:
            raise ValueError(f"{', '.join(numbering)} number generated nodes; this group lists its nodes: give "
                             "each node its own name and addresses instead")
        if self.count is not None and self.count != len(self.nodes):
            raise ValueError(f"count is {self.count} but the group lists {len(self.nodes)} nodes: drop count or "
                             "make it match")
        return self

    @property
    def size(self) -> int:
        return len(self.nodes) if self.nodes is not None else self.count  # type: ignore[return-value]

    @property
    def label(self) -> str:
        """How an error names the group: its prefix, or its first node."""
        return self.name_prefix or self.nodes[0].name  # type: ignore[index]


class ClusterFile(_Strict):
    apiVersion: Literal["ascend-pd/v1"] = "ascend-pd/v1"
    kind: Literal["Cluster"] = "Cluster"
    name: str = Field(min_length=1)
    description: str = ""
    node_types: dict[str, NodeType]
    links: dict[str, LinkSpec]
    topology: dict[LinkLevel, str] = Field(
        description="which link tier joins two devices that share a package, a node, a SuperPoD, or only the cluster")
    node_groups: list[NodeGroup] = Field(min_length=1)
    protocols: list[Literal["ascend", "tcp", "rdma"]] = Field(min_length=1)

    @model_validator(mode="after")
    def _references_resolve(self) -> "ClusterFile":
        for level, tier in self.topology.items():
            if tier not in self.links:
                raise ValueError(f"topology.{level} names link '{tier}', which is not under links: "
                                 f"add it to links or use one of {sorted(self.links)}")
        for group in self.node_groups:
            if group.type not in self.node_types:
                raise ValueError(f"node group '{group.label}' has type '{group.type}', not under node_types: "
                                 f"use one of {sorted(self.node_types)}")
        for required in ("node", "cluster"):
            if required not in self.topology:
                raise ValueError(f"topology needs a '{required}' entry")
        return self
