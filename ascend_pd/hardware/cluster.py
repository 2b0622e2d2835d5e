"""Clusters as plain data: nodes, devices, link tiers, and the topology queries the planner and validator ask."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from ipaddress import IPv4Address
from typing import Iterable

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
        """The chip of the first node; clusters shipped here are homogeneous."""
        return self.nodes[0].chip

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
