"""`ascend-pd ranktable`: print or write the HCCL rank table of each instance of a deployment."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ascend_pd.cli.common import input_errors_exit_2, one_shot
from ascend_pd.cli.render import parse_node_ips
from ascend_pd.errors import InputError


@click.command("ranktable")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_name", help="only this instance (default: every instance)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="write <instance>.json files here instead of printing one JSON object")
@click.option("--node-ip", "node_ips", multiple=True, metavar="NODE=IP",
              help="host address (server_id) of one node, added to the deployment's node_addresses; repeatable")
@input_errors_exit_2
@one_shot
def ranktable_cmd(file: str, instance_name: str | None, out_dir: str | None, node_ips: tuple[str, ...]) -> None:
    """HCCL rank tables (server_list with device_id, device_ip, rank_id; super_pod_list and super_device_id inside
    a SuperPoD) for the instances of FILE, for sites whose HCCL setup needs one. Mooncake does not."""
    from ascend_pd.deploy import load_deployment
    from ascend_pd.render import rank_table

    loaded = load_deployment(file).with_node_addresses(parse_node_ips(node_ips))
    instances = loaded.deployment.instances
    if instance_name is not None:
        instances = [i for i in instances if i.name == instance_name]
        if not instances:
            names = ", ".join(i.name for i in loaded.deployment.instances)
            raise InputError(f"no instance named '{instance_name}'", file=file, field="--instance",
                             fix=f"use one of {names}")
    cluster = loaded.cluster()
    tables = {i.name: rank_table(cluster, i) for i in instances}
    if out_dir is None:
        click.echo(json.dumps(tables, indent=2))
        return
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        (Path(out_dir) / f"{name}.json").write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    click.echo(f"wrote {len(tables)} rank table(s) to {out_dir}")
