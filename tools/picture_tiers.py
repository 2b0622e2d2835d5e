"""The link tiers of a cluster as a graphviz graph, read from the cluster as ascend_pd.hardware loads it: devices in
packages, packages in nodes, nodes in SuperPoDs, and on each join the tier that carries it with its bandwidth.

A cluster of many nodes shows its first two of each group and how many more there are; the table beside it lists
every tier of the file."""

from __future__ import annotations

from html import escape

from ascend_pd.hardware import Cluster, LinkTier, Node

SHOWN = 2  # of each level, the first this many are drawn; the rest are counted


def tier_text(tier: LinkTier) -> str:
    """'hccs-l1: 196 GB/s, 1.5 us, TP': what an edge of the tier says."""
    tp = ", TP" if tier.tp_capable else ""
    return f"{tier.name}: {tier.bandwidth / 1e9:g} GB/s, {tier.latency * 1e6:g} us{tp}"


def _tier_at(cluster: Cluster, level: str) -> LinkTier | None:
    name = cluster.topology.get(level)
    return cluster.links[name] if name else None


def _edge(a: str, b: str, tier: LinkTier | None, extra: str = "") -> str:
    if tier is None:
        return ""
    return f"  {a} -> {b} [label=\"{tier_text(tier)}\", dir=both{extra}];\n"


def _node_graph(cluster: Cluster, node: Node, key: str) -> tuple[str, str]:
    """The subgraph of one node (its packages and their devices) and the id of a device inside it."""
    devices = cluster.node_devices(node.name)
    per_package = node.chip.dies_per_package
    packages = sorted({d.package for d in devices})
    text = (f'  subgraph cluster_{key} {{\n    label="{node.name}: {node.type_name}, {node.chip.id}, '
            f'{node.device_count} devices"; style=rounded;\n')
    first_of_package = []
    for package in packages[:SHOWN]:
        ids = [f"{key}_d{d.local_id}" for d in devices if d.package == package]
        if per_package > 1:
            text += f'    subgraph cluster_{key}_p{package} {{ label="package {package}"; style=dashed;\n'
            for device_id, device in zip(ids, [d for d in devices if d.package == package]):
                text += f'      {device_id} [label="device {device.local_id}"];\n'
            text += "    }\n"
            text += _edge(ids[0], ids[1], _tier_at(cluster, "package"), ", constraint=false").replace("  ", "    ", 1)
        else:
            text += f'    {ids[0]} [label="device {devices[package].local_id}"];\n'
        first_of_package.append(ids[0])
    if len(first_of_package) > 1:
        tier = _tier_at(cluster, "node")
        extra = ", constraint=false" + (f", ltail=cluster_{key}_p0, lhead=cluster_{key}_p1" if per_package > 1 else "")
        text += _edge(first_of_package[0], first_of_package[1], tier, extra).replace("  ", "    ", 1)
    more = len(packages) - SHOWN
    if more > 0:
        unit = "packages" if per_package > 1 else "devices"
        text += f'    {key}_more [label="{more} more {unit}", shape=plaintext];\n'
    return text + "  }\n", first_of_package[0]


def _group_graph(cluster: Cluster, nodes: list[Node], key: str, label: str | None) -> tuple[str, str, str]:
    """The nodes of one SuperPoD (or of the cluster outside SuperPoDs): its text, its first device and the
    subgraph name an edge to it attaches to."""
    text = f'subgraph cluster_{key} {{\n  label="{label}"; style="rounded,bold";\n' if label else ""
    firsts = []
    for index, node in enumerate(nodes[:SHOWN]):
        part, first = _node_graph(cluster, node, f"{key}_n{index}")
        text += part
        firsts.append(first)
    if len(firsts) > 1:
        level = "superpod" if nodes[0].superpod is not None and "superpod" in cluster.topology else "cluster"
        text += _edge(firsts[0], firsts[1], _tier_at(cluster, level),
                      f", ltail=cluster_{key}_n0, lhead=cluster_{key}_n1")
    if len(nodes) > SHOWN:
        text += f'  {key}_more [label="{len(nodes) - SHOWN} more nodes", shape=plaintext];\n'
    if label:
        text += "}\n"
    return text, firsts[0], f"cluster_{key}"


def _tier_table(cluster: Cluster) -> str:
    rows = "".join(f"<tr><td>{escape(level)}</td><td>{escape(name)}</td>"
                   f"<td>{cluster.links[name].bandwidth / 1e9:g} GB/s</td>"
                   f"<td>{cluster.links[name].latency * 1e6:g} us</td>"
                   f"<td>{'yes' if cluster.links[name].tp_capable else 'no'}</td></tr>"
                   for level, name in cluster.topology.items())
    head = "<tr><td><b>joins</b></td><td><b>tier</b></td><td><b>per device</b></td><td><b>latency</b></td>" \
           "<td><b>TP across</b></td></tr>"
    return f'tiers [shape=plaintext, label=<<table border="0" cellborder="1" cellspacing="0">{head}{rows}</table>>];\n'


def tiers_dot(cluster: Cluster) -> str:
    """The graphviz source of the cluster's picture."""
    groups: dict[int | None, list[Node]] = {}
    for node in cluster.nodes:
        groups.setdefault(node.superpod, []).append(node)
    text = (f'digraph "{cluster.name}" {{\n'
            f'graph [fontname="Helvetica", fontsize=11, compound=true, rankdir=TB, labelloc=t, '
            f'label="{cluster.name}: {len(cluster.nodes)} nodes, {cluster.device_count} devices"];\n'
            'node [fontname="Helvetica", fontsize=9, shape=box, style="rounded,filled", fillcolor="#f4f4f4"];\n'
            'edge [fontname="Helvetica", fontsize=8, color="#1f77b4"];\n')
    firsts = []
    for index, (pod, nodes) in enumerate(groups.items()):
        label = f"SuperPoD {pod}: {len(nodes)} nodes" if pod is not None else None
        part, first, name = _group_graph(cluster, nodes, f"g{index}", label)
        text += part
        firsts.append((first, name))
    if len(firsts) > 1:
        (a, tail), (b, head) = firsts[0], firsts[1]
        text += _edge(a, b, _tier_at(cluster, "cluster"), f", ltail={tail}, lhead={head}")
    return text + _tier_table(cluster) + "}\n"
