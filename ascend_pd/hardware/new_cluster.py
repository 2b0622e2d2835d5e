"""A cluster file for a site's own stand-alone nodes, listed by name and address. A node type's devices, links,
topology and protocols are copied from the shipped cluster that defines it, so those figures have one source."""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from ascend_pd.errors import InputError
from ascend_pd.hardware.loader import build_cluster, shipped_clusters
from ascend_pd.hardware.schema import ClusterFile, NodeType
from ascend_pd.yamlfile import load_model, validate_model


@dataclass(frozen=True)
class NodeAddresses:
    """What an operator knows of one node. `device_ips` are by device id; None where the node did not say."""

    name: str
    host_ip: str
    device_ips: tuple[str, ...] | None = None
    device_ip_start: str | None = None
    interface: str | None = None


@dataclass(frozen=True)
class NodeTypeSource:
    """A node type as a shipped cluster of stand-alone nodes defines it, and the file that does."""

    name: str
    path: Path
    spec: ClusterFile

    @property
    def node_type(self) -> NodeType:
        return self.spec.node_types[self.name]

    @property
    def interface(self) -> str:
        """The NIC the shipped file gives nodes of this type: the default when the operator names none."""
        return next(g.interface for g in self.spec.node_groups if g.type == self.name)


def node_type_sources() -> dict[str, NodeTypeSource]:
    """Each node type of the shipped clusters whose nodes stand alone (no SuperPoD): the links of such a cluster are
    the ones a site's own servers of that type have. The first shipped file (by name) that defines a type is its
    source."""
    sources: dict[str, NodeTypeSource] = {}
    for path in shipped_clusters().values():
        spec, _ = load_model(ClusterFile, path)
        if any(group.superpod is not None for group in spec.node_groups):
            continue
        for name in spec.node_types:
            sources.setdefault(name, NodeTypeSource(name, path, spec))
    return sources


def node_type_source(name: str) -> NodeTypeSource:
    sources = node_type_sources()
    if name not in sources:
        raise InputError(f"unknown node type '{name}'", field="--node-type",
                         fix=f"use one of {', '.join(sorted(sources))} (the node types of the shipped clusters)")
    return sources[name]


def _node_entry(node: NodeAddresses) -> dict:
    entry: dict = {"name": node.name, "host_ip": node.host_ip}
    if node.device_ips is not None:
        start = IPv4Address(node.device_ips[0])
        consecutive = all(IPv4Address(ip) == start + d for d, ip in enumerate(node.device_ips))
        entry.update({"device_ip_start": str(start)} if consecutive else {"device_ips": list(node.device_ips)})
    elif node.device_ip_start is not None:
        entry["device_ip_start"] = node.device_ip_start
    if node.interface is not None:
        entry["interface"] = node.interface
    return entry


def new_cluster_document(name: str, source: NodeTypeSource, nodes: list[NodeAddresses], interface: str | None,
                         given_as: str) -> dict:
    """The cluster file (as data) for `nodes` of `source`'s type, each at its own addresses. It is loaded once
    before it is returned, so whatever the loader refuses (a duplicate name or address, an unsafe name) is refused
    here, named against `given_as` (the flag or directory the nodes came from)."""
    if not nodes:
        raise InputError("no nodes given", field=given_as, fix="name each node: --node NAME=HOST_IP[,DEVICE_IP_START]")
    spec = source.spec
    shared = {n.interface for n in nodes}
    group_interface = interface or (shared.pop() if len(shared) == 1 and None not in shared else source.interface)
    document = {
        "apiVersion": spec.apiVersion, "kind": spec.kind, "name": name,
        "description": f"{len(nodes)} {source.name} nodes, written by `ascend-pd cluster new`; the node type, links, "
                       f"topology and protocols are those of the shipped cluster {source.path.stem}.",
        "node_types": {source.name: source.node_type.model_dump(mode="json", exclude_defaults=True)},
        "links": {tier: link.model_dump(mode="json", exclude_defaults=True) for tier, link in spec.links.items()},
        "topology": dict(spec.topology),
        "node_groups": [{"type": source.name, "interface": group_interface,
                         "nodes": [_node_entry(NodeAddresses(n.name, n.host_ip, n.device_ips, n.device_ip_start,
                                                             n.interface if n.interface != group_interface else None))
                                   for n in nodes]}],
        "protocols": list(spec.protocols),
    }
    build_cluster(validate_model(ClusterFile, document, given_as), given_as)
    return document
