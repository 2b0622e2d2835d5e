"""`ascend-pd clusters`, `models` and `show cluster`: what the toolkit knows about hardware and models."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from ascend_pd.cli.common import input_errors_exit_2

GB = 1e9
GIB = 1024**3


@click.command("clusters")
@input_errors_exit_2
def clusters_cmd() -> None:
    """List the shipped cluster configs."""
    from ascend_pd.hardware import DEFAULT_CLUSTER, load_cluster, shipped_clusters

    table = Table(title="Shipped clusters (superpod_configs/clusters/)")
    for column in ("name", "nodes", "devices", "chip", "SuperPoDs", "protocols"):
        table.add_column(column)
    for name in shipped_clusters():
        cluster = load_cluster(name)
        label = f"{name} (default)" if name == DEFAULT_CLUSTER else name
        chips = " + ".join(chip.id for chip in cluster.chips)
        table.add_row(label, str(len(cluster.nodes)), str(cluster.device_count), chips,
                      str(len(cluster.superpods) or "-"), ", ".join(cluster.protocols))
    Console().print(table)


@click.command("models")
@input_errors_exit_2
def models_cmd() -> None:
    """List the built-in model catalog."""
    from ascend_pd.models import model_catalog

    table = Table(title="Built-in models")
    for column in ("id", "attention", "layers", "params (total / active)", "KV bytes/token (bf16)", "description"):
        table.add_column(column)
    for model_id, spec in model_catalog().items():
        table.add_row(model_id, spec.attention.upper() + (" + MoE" if spec.is_moe else ""), str(spec.num_layers),
                      f"{spec.total_params / 1e9:.1f}B / {spec.active_params / 1e9:.1f}B",
                      f"{spec.kv_bytes_per_token():,}", spec.description)
    Console().print(table)


@click.group("show")
def show_cmd() -> None:
    """Show one cluster's topology."""


@show_cmd.command("cluster")
@click.argument("name_or_path")
@input_errors_exit_2
def show_cluster(name_or_path: str) -> None:
    """Summarise NAME_OR_PATH: a shipped cluster name or a cluster YAML file."""
    from ascend_pd.hardware import load_cluster

    cluster = load_cluster(name_or_path)
    console = Console()
    console.print(f"[bold]{cluster.name}[/bold]: {cluster.description}")
    console.print(f"{len(cluster.nodes)} nodes, {cluster.device_count} devices"
                  + (f" in {len(cluster.superpods)} SuperPoD(s)" if cluster.superpods else ""))
    for chip in cluster.chips:
        console.print(f"chip {chip.id}: {chip.description}; per device {chip.hbm_bytes / GIB:.0f} GiB HBM at "
                      f"{chip.hbm_bandwidth / GB:.0f} GB/s, {chip.bf16_flops / 1e12:.0f} TFLOPS BF16, "
                      f"{chip.int8_ops / 1e12:.0f} TOPS INT8; {chip.dies_per_package} device(s) per package")
    links = Table(title="Link tiers")
    for column in ("level", "link", "GB/s per device", "latency (us)", "TP allowed", "full mesh"):
        links.add_column(column)
    for level in ("package", "node", "superpod", "cluster"):
        if level in cluster.topology:
            link = cluster.links[cluster.topology[level]]
            links.add_row(level, link.name, f"{link.bandwidth / GB:.0f}", f"{link.latency * 1e6:g}",
                          "yes" if link.tp_capable else "no", "yes" if link.full_mesh else "no")
    console.print(links)
    nodes = Table(title="Nodes")
    for column in ("node", "type", "host ip", "interface", "devices", "SuperPoD"):
        nodes.add_column(column)
    shown = cluster.nodes if len(cluster.nodes) <= 8 else cluster.nodes[:4] + cluster.nodes[-2:]
    for node in shown:
        nodes.add_row(node.name, node.type_name, node.host_ip, node.interface, str(node.device_count),
                      "-" if node.superpod is None else str(node.superpod))
    console.print(nodes)
    if len(shown) < len(cluster.nodes):
        console.print(f"({len(cluster.nodes) - len(shown)} more nodes not shown)")
    lo, hi = cluster.ephemeral_port_range()
    console.print(f"protocols: {', '.join(cluster.protocols)}; Ascend transport ephemeral ports [{lo}, {hi})")
