"""Find and load cluster descriptions: shipped ones by name, or any YAML file by path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ascend_pd.errors import InputError
from ascend_pd.hardware.chips import chip_catalog
from ascend_pd.hardware.cluster import Cluster, Device, LinkTier, Node, next_ip
from ascend_pd.hardware.schema import ClusterFile
from ascend_pd.yamlfile import load_model

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


def build_cluster(spec: ClusterFile, source: str) -> Cluster:
    chips = chip_catalog()
    nodes: list[Node] = []
    devices: list[Device] = []
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
        width = max(2, len(str(group.count - 1)))
        for i in range(group.count):
            name = f"{group.name_prefix}{i:0{width}d}"
            pod_index = superpod_nodes.get(group.superpod, 0) if group.superpod is not None else 0
            if group.superpod is not None:
                superpod_nodes[group.superpod] = pod_index + 1
            nodes.append(Node(name=name, index=len(nodes), type_name=group.type, chip=chip,
                              host_ip=next_ip(group.host_ip_start, i), interface=group.interface,
                              superpod=group.superpod, resource_name=node_type.resource_name,
                              device_count=node_type.devices))
            for local in range(node_type.devices):
                devices.append(Device(
                    global_id=len(devices), node=name, local_id=local,
                    package=local // chip.dies_per_package, die=local % chip.dies_per_package,
                    superpod=group.superpod,
                    super_device_id=None if group.superpod is None else pod_index * node_type.devices + local,
                    device_ip=next_ip(group.device_ip_start, i * node_type.devices + local)))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[0]
        raise InputError(f"two node groups produce the node name '{dup}'", file=source, field="node_groups",
                         fix="give each node group its own name_prefix")
    links = {name: LinkTier(name=name, level=next((lvl for lvl, t in spec.topology.items() if t == name), "cluster"),
                            bandwidth=link.bandwidth_gbytes_per_s * 1e9, latency=link.latency_us * 1e-6,
                            tp_capable=link.tp_capable, full_mesh=link.full_mesh)
             for name, link in spec.links.items()}
    return Cluster(name=spec.name, description=spec.description, nodes=tuple(nodes), devices=tuple(devices),
                   links=links, topology=dict(spec.topology), protocols=tuple(spec.protocols), source=source)


@cache
def _load_path(path: str) -> Cluster:
    spec, _ = load_model(ClusterFile, path)
    return build_cluster(spec, path)


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
