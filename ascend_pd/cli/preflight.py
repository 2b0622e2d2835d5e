"""`ascend-pd preflight`: on a serving node, check devices, links, CANN, driver, vllm-ascend, Mooncake, ports and
environment."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ascend_pd.cli.common import EXIT_FINDINGS, EXIT_OK, input_errors_exit_2


@click.command("preflight")
@click.option("--deployment", "deployment_file", type=click.Path(dir_okay=False),
              help="deployment.yaml: adds the checks of this node's devices, peers and ports")
@click.option("--node", help="this node's name in the cluster (default: found by host name or host IP)")
@click.option("--ascend-root", type=click.Path(file_okay=False, path_type=Path), default=Path("/usr/local/Ascend"),
              show_default=True, help="where CANN (ascend-toolkit) and the NPU driver are installed")
@click.option("--hccn-conf", type=click.Path(dir_okay=False, path_type=Path), default=Path("/etc/hccn.conf"),
              show_default=True, help="the device network configuration file")
@input_errors_exit_2
def preflight_cmd(deployment_file: str | None, node: str | None, ascend_root: Path, hccn_conf: Path) -> None:
    """Check that this node is ready to serve: one line per check, PASS, FAIL (with the fix) or SKIP.

    Exit status: 0 nothing failed, 1 a check failed, 2 bad input.
    """
    from ascend_pd.deploy import load_deployment
    from ascend_pd.deploy.preflight import Site, Target, run_preflight
    from ascend_pd.deploy.preflight.run import target_for

    target = Target()
    if deployment_file is not None:
        target = target_for(load_deployment(deployment_file), node)
        where = f"node {target.node.name}" if target.node else "this host (not found in the cluster; pass --node)"
        click.echo(f"preflight of {where} for {deployment_file}")
    results = run_preflight(Site(ascend_root=ascend_root, hccn_conf=hccn_conf), target)
    for result in results:
        click.echo(result.line())
    failures = sum(r.status == "fail" for r in results)
    click.echo(f"{failures} check(s) failed" if failures else "all checks passed or skipped")
    sys.exit(EXIT_FINDINGS if failures else EXIT_OK)
