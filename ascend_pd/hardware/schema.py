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


class NodeGroup(_Strict):
    """`count` nodes of one type, named `{name_prefix}{index:02d}` with addresses counted up from the starts."""

    type: str
    count: int = Field(gt=0, le=4096)
    name_prefix: str = Field(min_length=1)
    superpod: int | None = Field(None, ge=0)
    host_ip_start: IPv4Address = IPv4Address("127.0.0.1")
    device_ip_start: IPv4Address | None = None
    interface: str = "eth0"


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
                raise ValueError(f"node group '{group.name_prefix}' has type '{group.type}', not under node_types: "
                                 f"use one of {sorted(self.node_types)}")
        for required in ("node", "cluster"):
            if required not in self.topology:
                raise ValueError(f"topology needs a '{required}' entry")
        return self
