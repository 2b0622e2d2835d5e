"""Find and load cluster descriptions: shipped ones by name, or any YAML file by path."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ascend_pd.errors import InputError
from ascend_pd.hardware.chips import chip_catalog
from ascend_pd.hardware.cluster import Cluster, Device, LinkTier, Node, next_ip
from ascend_pd.hardware.node_names import LABEL_VALUE_RULE, node_name_problem
from ascend_pd.hardware.schema import ClusterFile, NodeGroup
from ascend_pd.yamlfile import Loc, dotted, load_model, nearest_line

DEFAULT_CLUSTER = "cloudmatrix384"


def configs_dir() -> Path:
    """superpod_configs/, inside the installed package or beside it in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "superpod_configs", here.parent / "superpod_configs"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("superpod_configs/ is missing from this installation")


def shipped_clusters() -> dict[str, Path]:
    return {p.stem: p for p in sorted((configs_dir() / "clusters").glob("*.yaml"))}


@dataclass(frozen=True)
class _Where:
    """The file being loaded and its line map, so an error points at the line."""

    source: str
    lines: dict[Loc, int]

    def error(self, message: str, loc: Loc, fix: str) -> InputError:
        return InputError(message, file=self.source, field=dotted(loc), line=nearest_line(self.lines, loc), fix=fix)


@dataclass(frozen=True)
class _NodeEntry:
    """One node of a group, generated or listed, before it becomes a Node. A listed node keeps where it is written
    (`loc`) and which key gave its device addresses, so an error can name them."""

    name: str
    host_ip: str
    device_ips: tuple[str | None, ...]
    interface: str
    loc: Loc | None = None
    device_key: str = "device_ip_start"


def _generated(group: NodeGroup, devices: int) -> list[_NodeEntry]:
    width = max(2, len(str(group.size - 1)))
    return [_NodeEntry(f"{group.name_prefix}{i:0{width}d}", next_ip(group.host_ip_start, i),  # type: ignore[arg-type]
                       tuple(next_ip(group.device_ip_start, i * devices + d) for d in range(devices)),
                       group.interface)
            for i in range(group.size)]


def _listed(group: NodeGroup, group_index: int, devices: int, where: _Where) -> list[_NodeEntry]:
    entries = []
    for k, node in enumerate(group.nodes or ()):
        loc: Loc = ("node_groups", group_index, "nodes", k)
        problem = node_name_problem(node.name)
        if problem:
            raise where.error(problem, loc + ("name",), f"rename the node: use only {LABEL_VALUE_RULE}")
        if node.device_ips is None:
            entries.append(_NodeEntry(node.name, str(node.host_ip),
                                      tuple(next_ip(node.device_ip_start, d) for d in range(devices)),
                                      node.interface or group.interface, loc))
            continue
        if len(node.device_ips) != devices:
            raise where.error(f"node '{node.name}' lists {len(node.device_ips)} device addresses; its type "
                              f"'{group.type}' has {devices} devices", loc + ("device_ips",),
                              f"list one address per device, {devices} in all, device 0 first")
        entries.append(_NodeEntry(node.name, str(node.host_ip), tuple(str(ip) for ip in node.device_ips),
                                  node.interface or group.interface, loc, "device_ips"))
    return entries


def _check_names(entries: list[_NodeEntry], where: _Where) -> None:
    seen: dict[str, _NodeEntry] = {}
    for entry in entries:
        first = seen.setdefault(entry.name, entry)
        if first is entry:
            continue
        listed = entry.loc or first.loc
        if listed is None:
            raise InputError(f"two node groups produce the node name '{entry.name}'", file=where.source,
                             field="node_groups", fix="give each node group its own name_prefix")
        raise where.error(f"node name '{entry.name}' is given to two nodes", listed + ("name",),
                          "give each node its own name")


def _check_addresses(entries: list[_NodeEntry], where: _Where) -> None:
    """No listed node shares a host or device address with another node. Generated nodes are not held to it: files
    written before nodes could be listed may put several groups on one default address."""
    for what, addresses in (("host address", lambda e: (e.host_ip,)), ("device address", lambda e: e.device_ips)):
        owner: dict[str, _NodeEntry] = {}
        for entry in entries:
            for address in addresses(entry):
                if address is None:
                    continue
                first = owner.get(address)
                if first is None:
                    owner[address] = entry
                    continue
                if entry.loc is None and first.loc is None:
                    continue
                listed = entry if entry.loc is not None else first
                key = "host_ip" if what == "host address" else listed.device_key
                holders = f"node '{entry.name}' twice" if first is entry else \
                    f"both node '{first.name}' and node '{entry.name}'"
                raise where.error(f"{what} {address} belongs to {holders}", listed.loc + (key,),  # type: ignore[operator]
                                  f"give each node its own {what}")


def build_cluster(spec: ClusterFile, source: str, lines: dict[Loc, int] | None = None) -> Cluster:
    chips = chip_catalog()
    where = _Where(source, lines or {})
    nodes: list[Node] = []
    devices: list[Device] = []
    entries: list[_NodeEntry] = []
    superpod_nodes: dict[int, int] = {}
    for group_index, group in enumerate(spec.node_groups):
        node_type = spec.node_types[group.type]
        chip = chips.get(node_type.chip)
        if chip is None:
            raise InputError(f"unknown chip '{node_type.chip}'", file=source, field=f"node_types.{group.type}.chip",
                             fix=f"use one of {', '.join(chips)}")
        if node_type.devices % chip.dies_per_package:
            raise InputError(f"{node_type.devices} devices is not a whole number of {chip.id} packages",
                             file=source, field=f"node_types.{group.type}.devices",
                             fix=f"use a multiple of {chip.dies_per_package}")
        group_entries = (_listed(group, group_index, node_type.devices, where) if group.nodes is not None
                         else _generated(group, node_type.devices))
        entries += group_entries
        for entry in group_entries:
            pod_index = superpod_nodes.get(group.superpod, 0) if group.superpod is not None else 0
            if group.superpod is not None:
                superpod_nodes[group.superpod] = pod_index + 1
            nodes.append(Node(name=entry.name, index=len(nodes), type_name=group.type, chip=chip,
                              host_ip=entry.host_ip, interface=entry.interface,
                              superpod=group.superpod, resource_name=node_type.resource_name,
                              device_count=node_type.devices))
            for local in range(node_type.devices):
                devices.append(Device(
                    global_id=len(devices), node=entry.name, local_id=local,
                    package=local // chip.dies_per_package, die=local % chip.dies_per_package,
                    superpod=group.superpod,
                    super_device_id=None if group.superpod is None else pod_index * node_type.devices + local,
                    device_ip=entry.device_ips[local]))
    _check_names(entries, where)
    if any(entry.loc is not None for entry in entries):
        _check_addresses(entries, where)
    links = {name: LinkTier(name=name, level=next((lvl for lvl, t in spec.topology.items() if t == name), "cluster"),
                            bandwidth=link.bandwidth_gbytes_per_s * 1e9, latency=link.latency_us * 1e-6,
                            tp_capable=link.tp_capable, full_mesh=link.full_mesh)
             for name, link in spec.links.items()}
    return Cluster(name=spec.name, description=spec.description, nodes=tuple(nodes), devices=tuple(devices),
                   links=links, topology=dict(spec.topology), protocols=tuple(spec.protocols), source=source)


@cache
def _load_path(path: str) -> Cluster:
    spec, lines = load_model(ClusterFile, path)
    return build_cluster(spec, path, lines)


def load_cluster(name_or_path: str | Path | None = None) -> Cluster:
    """A shipped cluster by name (default: cloudmatrix384), or a cluster YAML file by path."""
    ref = str(name_or_path or DEFAULT_CLUSTER)
    shipped = shipped_clusters()
    if ref in shipped:
        return _load_path(str(shipped[ref]))
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return _load_path(str(path))
    raise InputError(f"unknown cluster '{ref}'", field="cluster",
                     fix=f"use a shipped cluster ({', '.join(shipped)}) or a path to a cluster YAML file")
