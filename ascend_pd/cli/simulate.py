"""`ascend-pd simulate`: run a deployment.yaml through the discrete-event simulator and report TTFT, TPOT, goodput."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ascend_pd.cli.common import input_errors_exit_2
from ascend_pd.cli.plan import build_workload, workload_options


@click.command("simulate")
@click.argument("deployment_file", type=click.Path(dir_okay=False))
@workload_options
@click.option("--duration", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="seconds of arrivals to simulate")
@click.option("--warmup", type=click.FloatRange(min=0), default=None,
              help="seconds of arrivals left out of the figures (default: a quarter of --duration)")
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=0.7, show_default=True,
              help="probability each MTP draft token is accepted (instances with --speculative-config)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
def simulate_cmd(deployment_file, workload_file, input_mean, input_p99, input_dist, output_mean, output_p99,
                 output_dist, rate, ttft_ms, tpot_ms, attainment, duration, warmup, mtp_acceptance, seed,
                 fmt) -> None:
    """Simulate DEPLOYMENT_FILE with Poisson arrivals.

    Without workload flags it uses the workload and SLO stored in the deployment.
    """
    from ascend_pd.deploy import load_deployment, validate
    from ascend_pd.errors import InputError
    from ascend_pd.models import get_model
    from ascend_pd.perf.cost import CostModel
    from ascend_pd.planner.simulator import simulate
    from ascend_pd.planner.workload import DEFAULT_SLO

    loaded = load_deployment(deployment_file)
    errors = [d for d in validate(loaded) if d.severity == "error"]
    if errors:
        first = errors[0]
        raise InputError(f"{first.message} ({first.code}; {len(errors)} error(s) in all)", file=deployment_file,
                         field=first.path, line=first.line, fix=f"{first.hint}; see `ascend-pd validate`")
    deployment = loaded.deployment
    if deployment.workload is None and not (workload_file or rate):
        raise InputError("the deployment has no workload", file=deployment_file, field="workload",
                         fix="add a workload section, or pass --workload FILE or --rate with length flags")
    from ascend_pd.planner.workload import DEFAULT_WORKLOAD

    workload, slo = build_workload(deployment.workload or DEFAULT_WORKLOAD, deployment.slo or DEFAULT_SLO,
                                   workload_file, input_mean, input_p99, input_dist, output_mean, output_p99,
                                   output_dist, rate, ttft_ms, tpot_ms, attainment)
    cluster = loaded.cluster()
    try:
        model = get_model(deployment.model.name)
    except InputError as exc:
        raise InputError(exc.message, file=deployment_file, field="model.name", fix=exc.fix) from None
    cost = CostModel(model, cluster.chip, cluster, deployment.model.quantization, deployment.model.kv_cache_dtype)
    result = simulate(deployment, cost, workload, slo, duration, duration / 4 if warmup is None else warmup, seed,
                      mtp_acceptance, base_dir=Path(deployment_file).parent)
    result["devices"] = sum(inst.device_count for inst in deployment.instances)
    result["goodput_per_device"] = result["goodput_rps"] / result["devices"]
    result["slo"] = slo.model_dump(mode="json")
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{deployment.metadata.name}: {result['requests']} requests at {workload.rate:g} req/s, "
                        f"{duration:g} s")
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
    Console().print(table)
