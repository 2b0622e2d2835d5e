"""`ascend-pd render`: validate a deployment.yaml, then write its launch scripts, manifests and rank tables to DIR."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ascend_pd.cli.common import EXIT_FINDINGS, input_errors_exit_2, one_shot
from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.errors import InputError
from ascend_pd.render.image import IMAGE_REPOSITORY, image_tag


def parse_node_ips(values: tuple[str, ...]) -> dict[str, str]:
    """NODE=IP pairs from repeated --node-ip flags."""
    pairs = {}
    for value in values:
        node, sep, ip = value.partition("=")
        if not sep or not node or not ip:
            raise InputError(f"'{value}' is not NODE=IP", field="--node-ip", fix="write it as --node-ip a3-00=10.0.0.5")
        pairs[node] = ip
    return pairs


@click.command("render")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="directory to write into")
@click.option("--target", type=click.Choice(["bash", "k8s", "all"]), default="all", show_default=True,
              help="bash launchers, Kubernetes manifests, or both")
@click.option("--interface", help="network interface for HCCL/Gloo on every node (default: the cluster config's)")
@click.option("--node-ip", "node_ips", multiple=True, metavar="NODE=IP",
              help="the address of one node at this site, where the cluster file's host_ip_start numbering "
                   "guesses wrong; repeat for more nodes. Written into the bundle's deployment.yaml "
                   "(node_addresses), which the proxy and the autoscaler read")
@click.option("--image", default=None,
              help="container image holding ascend-pd and vLLM, for the k8s target [default: "
                   f"{IMAGE_REPOSITORY}:{image_tag('<release>')}, where <release> is the deployment's "
                   f"vllm_ascend_version ({VLLM_ASCEND_RELEASE} when it names none); docker/Dockerfile builds it]")
@input_errors_exit_2
@one_shot
def render_cmd(file: str, out_dir: str, target: str, interface: str | None, node_ips: tuple[str, ...],
               image: str | None) -> None:
    """Validate FILE (a deployment.yaml) and write what runs it into DIR.

    DIR also gets the deployment's secrets (secrets/kv.key, secrets/admin.token, mode 0600; for the k8s target the
    Secret in k8s/secrets.yaml): made on the first render, kept by every later render into DIR.
    Refuses, printing the diagnostics, when validation finds errors (exit 1). Bad input exits 2.
    """
    from ascend_pd.deploy import load_deployment
    from ascend_pd.render import RenderOptions, render_bundle, write_bundle
    from ascend_pd.render.revisions import revisions

    loaded = load_deployment(file).with_node_addresses(parse_node_ips(node_ips))
    options = RenderOptions(target=target, interface=interface, image=image)
    result = render_bundle(loaded, options)
    for diagnostic in result.diagnostics:
        click.echo(diagnostic.render(file), err=result.refused)
    if result.refused:
        click.echo(f"{file}: not rendered, fix the errors above first", err=True)
        sys.exit(EXIT_FINDINGS)
    kept_before = revisions(Path(out_dir))
    written = write_bundle(result.files, out_dir, result.k8s_deployment)
    click.echo(f"wrote {len(written)} files to {out_dir}; see {out_dir}/README.md for what to run where")
    kept = revisions(Path(out_dir))
    if kept[-1:] != kept_before[-1:]:
        click.echo(f"kept the bundle it replaced as revision {kept[-1].number}: `ascend-pd rollback {out_dir}` puts it "
                   "back")
    click.echo(f"the deployment's secrets are in {out_dir}/secrets/ (kept when rendering into {out_dir} again): "
               "copy them with the bundle, never into version control")
