"""`ascend-pd cluster new`: write a cluster file for a site's own nodes, from their names and addresses or from
what each node reports about itself."""

from __future__ import annotations

from ipaddress import AddressValueError, IPv4Address
from pathlib import Path

import click

from ascend_pd.cli.common import input_errors_exit_2
from ascend_pd.errors import InputError

NODE_FORMAT = "NAME=HOST_IP[,DEVICE_IP_START]"


@click.group("cluster")
def cluster_cmd() -> None:
    """Describe your own cluster (`ascend-pd clusters` lists the shipped ones)."""


def _address(text: str, value: str) -> str:
    try:
        return str(IPv4Address(text.strip()))
    except AddressValueError:
        raise InputError(f"'{text}' in '{value}' is not an IPv4 address", field="--node",
                         fix=f"write it as --node {NODE_FORMAT}, e.g. --node npu-a=10.0.0.5,10.20.0.1") from None


def parse_node(value: str):
    """One --node flag: NAME=HOST_IP, optionally followed by ,DEVICE_IP_START."""
    from ascend_pd.hardware.new_cluster import NodeAddresses

    name, sep, addresses = value.partition("=")
    parts = addresses.split(",")
    if not sep or not name.strip() or not addresses or len(parts) > 2:
        raise InputError(f"'{value}' is not {NODE_FORMAT}", field="--node",
                         fix=f"write it as --node {NODE_FORMAT}, e.g. --node npu-a=10.0.0.5,10.20.0.1")
    device_ip_start = _address(parts[1], value) if len(parts) == 2 else None
    return NodeAddresses(name=name.strip(), host_ip=_address(parts[0], value), device_ip_start=device_ip_start)


def _check_interface(interface: str | None) -> None:
    from ascend_pd.deploy.rules.names import INTERFACE, INTERFACE_RULE
    from ascend_pd.hardware.node_names import unsafe_character

    bad = interface is not None and unsafe_character(interface, INTERFACE)
    if bad:
        raise InputError(f"interface {interface!r} has {bad}, which is not safe in a launch script",
                         field="--interface", fix=f"give the NIC's name: {INTERFACE_RULE}")


@cluster_cmd.command("new")
@click.option("--name", required=True, help="the cluster's name, as plans and reports will show it")
@click.option("--node-type", required=True,
              help="the nodes' type, as a shipped cluster of stand-alone nodes defines it (atlas-800i-a2, "
                   "atlas-800t-a3, cpu-host); its devices, links and protocols are copied from that file")
@click.option("--node", "node_values", multiple=True, metavar=NODE_FORMAT,
              help="one node: its name, the address other nodes and the proxy reach it at, and device 0's RoCE "
                   "address (`hccn_tool -i 0 -ip -g`; device d has that plus d). Repeat for each node")
@click.option("--from-reports", "reports", type=click.Path(file_okay=False),
              help="instead of --node: a directory with one subdirectory per node holding its saved npu-smi, "
                   "hccn_tool and ip output (docs/deployments.md, 'Describing your own nodes')")
@click.option("--interface", default=None,
              help="the host NIC HCCL and Gloo use on every node (default: what the reports say, else the shipped "
                   "file's for the node type)")
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="the cluster file to write; its JSON Schema (cluster.schema.json) is written beside it")
@input_errors_exit_2
def new_cmd(name: str, node_type: str, node_values: tuple[str, ...], reports: str | None, interface: str | None,
            out_file: str) -> None:
    """Write a cluster file for your own nodes, at addresses of your choosing (not necessarily consecutive).

    Check the result with `ascend-pd show cluster FILE`, then plan on it with `ascend-pd plan --cluster FILE`.
    """
    from ascend_pd.deploy.file_schemas import schema_file_name, with_schema_beside
    from ascend_pd.hardware.new_cluster import new_cluster_document, node_type_source
    from ascend_pd.yamlfile import dump_yaml

    if bool(node_values) == bool(reports):
        raise InputError("give the nodes either with --node or with --from-reports", field="--node",
                         fix=f"repeat --node {NODE_FORMAT} for each node, or name a reports directory")
    _check_interface(interface)
    source = node_type_source(node_type)
    if reports:
        nodes, given_as = _reported_nodes(reports, source), "--from-reports"
    else:
        nodes, given_as = [parse_node(value) for value in node_values], "--node"
    document = new_cluster_document(name, source, nodes, interface, given_as)
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = dump_yaml(document, default_flow_style=False, width=120)
    out.write_text(with_schema_beside("cluster", out, text), encoding="utf-8")
    click.echo(f"wrote {out} ({len(nodes)} {node_type} nodes; links and protocols from the shipped cluster "
               f"{source.path.stem}) and {schema_file_name('cluster')} beside it; check it with "
               f"`ascend-pd show cluster {out}`")


def _reported_nodes(reports: str, source) -> list:
    from ascend_pd.deploy.preflight.node_reports import read_node_reports
    from ascend_pd.hardware.chips import get_chip
    from ascend_pd.hardware.platform import chip_platform

    if chip_platform(get_chip(source.node_type.chip)) == "cpu":
        raise InputError(f"nodes of type '{source.name}' have no NPUs to report", field="--from-reports",
                         fix=f"give them with --node {NODE_FORMAT}")
    return read_node_reports(reports, source.node_type.devices)
