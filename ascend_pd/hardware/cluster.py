"""Clusters as plain data: nodes, devices, link tiers, and the topology queries the planner and validator ask."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from ipaddress import IPv4Address
from pathlib import Path
from typing import Iterable

from ascend_pd.errors import InputError
from ascend_pd.hardware.chips import Chip


@dataclass(frozen=True)
class LinkTier:
    name: str
    level: str  # package | node | superpod | cluster
    bandwidth: float  # bytes/s per device, one direction
    latency: float  # seconds
    tp_capable: bool
    full_mesh: bool = False


@dataclass(frozen=True)
class Device:
    """One device: `local_id` is what ASCEND_RT_VISIBLE_DEVICES and npu-smi call it on its node."""

    global_id: int
    node: str
    local_id: int
    package: int  # package index on the node
    die: int  # die index inside the package (0 on single-die chips)
    superpod: int | None
    super_device_id: int | None  # index inside the SuperPoD (A3 rank tables); None outside SuperPoDs
    device_ip: str | None


@dataclass(frozen=True)
class Node:
    name: str
    index: int
    type_name: str
    chip: Chip
    host_ip: str
    interface: str
    superpod: int | None
    resource_name: str
    device_count: int

    @property
    def packages(self) -> int:
        return self.device_count // self.chip.dies_per_package


@dataclass(frozen=True)
class Cluster:
    name: str
    description: str
    nodes: tuple[Node, ...]
    devices: tuple[Device, ...]
    links: dict[str, LinkTier]
    topology: dict[str, str]
    protocols: tuple[str, ...]
    source: str = ""
    _by_node: dict[str, tuple[Device, ...]] = field(default_factory=dict, compare=False, repr=False)
    _node_by_name: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        grouped: dict[str, list[Device]] = {node.name: [] for node in self.nodes}
        for device in self.devices:
            grouped[device.node].append(device)
        self._by_node.update({name: tuple(devs) for name, devs in grouped.items()})
        self._node_by_name.update({node.name: node for node in self.nodes})

    # --- lookups (a SuperCluster has thousands of nodes: every lookup here is a dict or computed once) -----------
    def node(self, name: str) -> Node:
        try:
            return self._node_by_name[name]
        except KeyError:
            raise KeyError(f"cluster '{self.name}' has no node '{name}'") from None

    def with_host_ips(self, host_ips: dict[str, str]) -> "Cluster":
        """The cluster with the named nodes at the given addresses (a site's own, where the file guessed them)."""
        if not host_ips:
            return self
        nodes = tuple(replace(n, host_ip=host_ips[n.name]) if n.name in host_ips else n for n in self.nodes)
        return replace(self, nodes=nodes, _by_node={}, _node_by_name={})

    def node_fix(self) -> str:
        """What to write instead of a node this cluster does not have."""
        known = ", ".join(n.name for n in self.nodes[:4])
        shipped = not self.source or Path(self.source).parent.parts[-2:] == ("superpod_configs", "clusters")
        return f"use a node of the cluster (`ascend-pd show cluster {self.name if shipped else self.source}`), " \
               f"e.g. {known}"

    def require_node(self, name: str, *, field: str, file: str | None = None, line: int | None = None,
                     otherwise: str | None = None) -> Node:
        """The node, or the one error every part gives for a node the cluster does not have (`otherwise`: another
        way out, added to the fix)."""
        if not self.has_node(name):
            fix = self.node_fix() + (f", or {otherwise}" if otherwise else "")
            raise InputError(f"node '{name}' is not in cluster '{self.name}'", file=file, field=field, line=line,
                             fix=fix)
        return self.node(name)

    def has_node(self, name: str) -> bool:
        return name in self._by_node

    def node_devices(self, node: str) -> tuple[Device, ...]:
        return self._by_node[node]

    def device(self, node: str, local_id: int) -> Device:
        devices = self._by_node[node]
        if not 0 <= local_id < len(devices):
            raise KeyError(f"node '{node}' has devices 0..{len(devices) - 1}, not {local_id}")
        return devices[local_id]

    @property
    def chip(self) -> Chip:
        """The chip every node carries. A cluster that mixes chips has no such chip, and pricing it with one of them
        would misprice the others, so asking is an error: price each chip group (`chip_groups`) instead."""
        if len(self.chips) > 1:
            raise InputError(f"cluster '{self.name}' mixes {self.describe_chips()}, and this step prices one chip",
                             file=self.source or None, field="node_types",
                             fix="name the chip where the command takes one (--chip), or use a cluster file whose "
                                 "nodes share one chip")
        return self.chips[0]

    @cached_property
    def chips(self) -> tuple[Chip, ...]:
        """Each chip the nodes carry, once, in node order."""
        return tuple({node.chip.id: node.chip for node in self.nodes}.values())

    def describe_chips(self) -> str:
        """'910b3 nodes (type a2) and 910c nodes (type a3)': what an error about a mixed cluster names."""
        types = {chip.id: sorted({n.type_name for n in self.nodes if n.chip.id == chip.id}) for chip in self.chips}
        return " and ".join(f"{chip} nodes (type {', '.join(names)})" for chip, names in types.items())

    @cached_property
    def chip_groups(self) -> dict[str, "Cluster"]:
        """The nodes of each chip as a cluster of their own, by chip id, with this cluster's name, source and links:
        an instance on those nodes is priced on that group. A cluster of one chip is its own only group."""
        if len(self.chips) == 1:
            return {self.chips[0].id: self}
        groups = {}
        for chip in self.chips:
            nodes = tuple(n for n in self.nodes if n.chip.id == chip.id)
            names = {n.name for n in nodes}
            groups[chip.id] = Cluster(
                name=self.name, description=f"the {chip.id} nodes of {self.name}", nodes=nodes,
                devices=tuple(d for d in self.devices if d.node in names), links=self.links, topology=self.topology,
                protocols=self.protocols, source=self.source)
        return groups

    def chips_of(self, nodes: Iterable[str]) -> tuple[Chip, ...]:
        """The chips the named nodes carry, each once, in the order met; names the cluster lacks are skipped."""
        found: dict[str, Chip] = {}
        for name in nodes:
            if name in self._node_by_name:
                chip = self._node_by_name[name].chip
                found.setdefault(chip.id, chip)
        return tuple(found.values())

    @cached_property
    def superpods(self) -> tuple[int, ...]:
        return tuple(sorted({n.superpod for n in self.nodes if n.superpod is not None}))

    @cached_property
    def superpod_device_count(self) -> int:
        """Devices of the first SuperPoD (0 outside SuperPoDs)."""
        if not self.superpods:
            return 0
        return sum(n.device_count for n in self.nodes if n.superpod == self.superpods[0])

    @property
    def device_count(self) -> int:
        return len(self.devices)

    @cached_property
    def devices_per_node(self) -> int:
        return max(node.device_count for node in self.nodes)

    # --- topology --------------------------------------------------------------------------------------------
    def link_level(self, a: Device, b: Device) -> str:
        """The closest level two devices share: 'device', 'package', 'node', 'superpod' or 'cluster'."""
        if a.node == b.node:
            if a.local_id == b.local_id:
                return "device"
            if a.package == b.package and "package" in self.topology:
                return "package"
            return "node"
        if a.superpod is not None and a.superpod == b.superpod and "superpod" in self.topology:
            return "superpod"
        return "cluster"

    def link_between(self, a: Device, b: Device) -> LinkTier | None:
        """The link tier traffic between `a` and `b` uses; None for a device and itself."""
        level = self.link_level(a, b)
        if level == "device":
            return None
        return self.links[self.topology[level]]

    def widest_link(self, devices: Iterable[Device]) -> LinkTier | None:
        """The slowest (farthest) tier any pair in `devices` must cross; None for a single device."""
        devices = list(devices)
        order = ["package", "node", "superpod", "cluster"]
        worst = -1
        for d in devices[1:]:
            level = self.link_level(devices[0], d)
            if level != "device":
                worst = max(worst, order.index(level))
        # The levels nest (package in node in SuperPoD), so the farthest pair always includes devices[0].
        if worst < 0:
            return None
        return self.links[self.topology[order[worst]]]

    def tp_group_problem(self, devices: Iterable[Device]) -> str | None:
        """Why `devices` cannot form one TP group, or None when they can."""
        devices = list(devices)
        link = self.widest_link(devices)
        if link is None or link.tp_capable:
            return None
        return (f"the group spans link '{link.name}' ({link.level} level), which does not carry tensor-parallel "
                f"traffic on this cluster")

    def free_devices(self, node: str, used: Iterable[int]) -> list[int]:
        taken = set(used)
        return [d.local_id for d in self._by_node[node] if d.local_id not in taken]

    def ephemeral_port_range(self) -> tuple[int, int]:
        """Ports the Ascend direct transport picks at random: [20000, 20000 + 1000 x devices per node)."""
        return 20000, 20000 + 1000 * self.devices_per_node


def next_ip(start: IPv4Address | None, offset: int) -> str | None:
    return None if start is None else str(start + offset)
