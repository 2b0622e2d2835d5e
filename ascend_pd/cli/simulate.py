"""`ascend-pd simulate`: run a deployment.yaml through the discrete-event simulator and report TTFT, TPOT, goodput."""

from __future__ import annotations

import json

import click

from ascend_pd.cli.common import calibration_option, input_errors_exit_2, one_shot, version_option
from ascend_pd.cli.plan import workload_options
from ascend_pd.defaults import MTP_ACCEPTANCE


@click.command("simulate")
@click.argument("deployment_file", type=click.Path(dir_okay=False))
@workload_options
@click.option("--duration", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="seconds of arrivals to simulate")
@click.option("--warmup", type=click.FloatRange(min=0), default=None,
              help="seconds of arrivals left out of the figures (default: a quarter of --duration)")
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=MTP_ACCEPTANCE, show_default=True,
              help="probability each MTP draft token is accepted (instances with --speculative-config)")
@calibration_option
@version_option
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
@one_shot
def simulate_cmd(deployment_file, workload_file, duration, warmup, mtp_acceptance, calibration, vllm_ascend_version,
                 seed, fmt, **workload_values) -> None:
    """Simulate DEPLOYMENT_FILE with Poisson arrivals.

    Without workload flags it uses the workload and SLO stored in the deployment.
    """
    from ascend_pd.planner.deployment_simulation import simulate_deployment_file

    run = simulate_deployment_file(deployment_file, workload_file, duration=duration, warmup=warmup,
                                   mtp_acceptance=mtp_acceptance, seed=seed, calibration=calibration,
                                   vllm_ascend_version=vllm_ascend_version,
                                   **workload_values)
    result, slo = run.result, run.slo
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{run.deployment.metadata.name}: {result['requests']} requests at {run.workload.rate:g} "
                        f"req/s, {duration:g} s")
    table.add_column("figure")
    table.add_column("value", justify="right")
    def spread(figure: str, digits: int) -> str:
        return " / ".join(f"{result[figure][k]:.{digits}f}" for k in ("p50", "p90", "p99")) + " ms"

    for name, value in (("goodput", f"{result['goodput_rps']:.2f} req/s ({result['goodput_per_device']:.4f} "
                                    "per device)"),
                        ("SLO attainment", f"{result['slo_attainment']:.1%} (TTFT <= {slo.ttft_ms:g} ms and TPOT <= "
                                           f"{slo.tpot_ms:g} ms)"),
                        ("TTFT p50 / p90 / p99", spread("ttft_ms", 0)),
                        ("TPOT p50 / p90 / p99", spread("tpot_ms", 1)),
                        ("completed", f"{result['completed']} of {result['requests']}")):
        table.add_row(name, value)
    if result["groups"] > result["simulated_groups"]:
        table.add_row("simulated", f"{result['simulated_groups']} of {result['groups']} identical SuperPoD groups, "
                                   "at its share of the rate; totals scaled")
    Console().print(table)
