"""`ascend-pd plan`: search P/D (or colocated) deployments for a model, workload and SLO; write the plan files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from ascend_pd.cli.common import calibration_option, input_errors_exit_2, one_shot, version_option
from ascend_pd.defaults import MODEL_ROOT, MTP_ACCEPTANCE
from ascend_pd.deploy.connector_needs import PUSH_MIN_CANN

PROGRESS_AFTER_S = 1.0


def workload_options(fn):
    """Workload and SLO flags shared by `plan` and `simulate`. Each flag but --workload is named after a keyword of
    planner.workload_file.build_workload, so a command hands them on as they come (`**workload_values`)."""
    options = [
        click.option("--workload", "workload_file", type=click.Path(dir_okay=False),
                     help="YAML with `workload:` (and optional `slo:`) as in deployment.yaml, or a JSONL trace of "
                          "{input_tokens, output_tokens}"),
        click.option("--input-mean", type=click.FloatRange(min=1), help="mean prompt tokens"),
        click.option("--input-p99", type=click.FloatRange(min=1), help="99th percentile of prompt tokens"),
        click.option("--input-dist", type=click.Choice(["fixed", "normal", "lognormal"]), help="prompt length shape"),
        click.option("--output-mean", type=click.FloatRange(min=1), help="mean output tokens"),
        click.option("--output-p99", type=click.FloatRange(min=1), help="99th percentile of output tokens"),
        click.option("--output-dist", type=click.Choice(["fixed", "normal", "lognormal"]), help="output length shape"),
        click.option("--rate", type=click.FloatRange(min=0, min_open=True), help="arrival rate, requests/s"),
        click.option("--ttft-ms", type=click.FloatRange(min=0, min_open=True), help="TTFT SLO"),
        click.option("--tpot-ms", type=click.FloatRange(min=0, min_open=True), help="TPOT SLO"),
        click.option("--attainment", type=click.FloatRange(0, 1, min_open=True),
                     help="share of requests that must meet both SLOs"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


class _LazyProgress:
    """A rich progress bar that appears only once the search has run for a second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.started = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled or time.perf_counter() - self.started < PROGRESS_AFTER_S:
            return
        if self.bar is None:
            from rich.progress import Progress

            self.bar = Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task("evaluating instance shapes", total=total)
        self.bar.update(self.task, completed=done, description=f"evaluating {label}")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@click.command("plan")
@click.option("--model", required=True, help="catalog id (`ascend-pd models`) or a directory holding config.json")
@click.option("--cluster", default=None, help="shipped cluster name or cluster YAML path (default: cloudmatrix384)")
@click.option("--quant", type=click.Choice(["bf16", "w8a8", "w4a8"]), default=None,
              help="weight quantization (default: w8a8 for models whose bf16 weights exceed half a node, else bf16)")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default="bf16", show_default=True)
@workload_options
@click.option("--devices", type=click.IntRange(min=1), default=None,
              help="device budget (default: the whole cluster); with --rate the planner uses the fewest devices")
@click.option("--mtp", type=click.IntRange(min=0), default=None,
              help="MTP draft tokens per decode step (default: the model's MTP layers)")
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=MTP_ACCEPTANCE, show_default=True)
@click.option("--connector", type=click.Choice(["ascend-pd", "vllm-ascend"]), default=None,
              help="KV connector the deployment runs: ascend-pd's AscendPDConnector, or vllm-ascend's own Mooncake "
                   "connectors (default: ascend-pd, or vllm-ascend for an int8 KV cache on NPUs); the report says "
                   "what each needs")
@click.option("--kv-mode", type=click.Choice(["push", "pull"]), default="push", show_default=True,
              help=f"how KV moves P -> D: pushed layer by layer during prefill (needs CANN {PUSH_MIN_CANN} on NPUs), "
                   "or pulled after it")
@click.option("--model-path", default=None, metavar="PATH",
              help=f"where the weights are on every serving node, written as the deployment's model.path "
                   f"(default: {MODEL_ROOT}/<model id>)")
@calibration_option
@version_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write deployment.yaml, plan.json, report.md, pareto.csv, pareto.png and placement.png here")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
@one_shot
def plan_cmd(model, cluster, quant, kv_dtype, workload_file, devices, mtp, mtp_acceptance, connector, kv_mode,
             model_path, calibration, vllm_ascend_version, out_dir, fmt, **workload_values) -> None:
    """Plan a deployment of MODEL on a cluster for a workload and SLO.

    Without workload flags the default workload is prompts lognormal (mean 4000, p99 16000 tokens), outputs
    lognormal (mean 500, p99 2000), SLO TTFT 2000 ms, TPOT 50 ms, 90% attainment. With --rate (and no
    --devices) the plan uses the fewest devices that sustain that rate; otherwise it maximises goodput on the
    budget. --calibration picks the cost model's profile (see `ascend-pd calibrate` to fit your own).
    """
    from ascend_pd.perf.context import chip_group_costs
    from ascend_pd.planner.chip_groups import plan_chip_groups
    from ascend_pd.planner.plan import PlanInputs
    from ascend_pd.planner.report import plan_json, write_outputs
    from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD
    from ascend_pd.planner.workload_file import build_workload

    workload, slo = build_workload(DEFAULT_WORKLOAD, DEFAULT_SLO, workload_file, **workload_values)
    # one per chip the cluster's nodes carry
    costs = chip_group_costs(model, cluster, quant, kv_dtype, calibration, vllm_ascend_version)
    rate = workload_values["rate"]
    target = rate if rate and not devices else None
    progress = _LazyProgress(fmt == "text")
    try:
        cost, outcome = plan_chip_groups(costs, PlanInputs(
            workload=workload, slo=slo, devices=devices, rate=target, mtp=mtp, mtp_acceptance=mtp_acceptance,
            kv_mode=kv_mode, connector=connector, cluster_ref=cluster or costs[0].cluster.name), progress)
    finally:
        progress.stop()
    if model_path:
        weights = outcome.deployment.model.model_copy(update={"path": model_path})
        outcome.deployment = outcome.deployment.model_copy(update={"model": weights})
    data = write_outputs(cost, outcome, Path(out_dir)) if out_dir else plan_json(cost, outcome)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
        return
    if len(costs) > 1:
        others = ", ".join(c.chip.id for c in costs if c is not cost)
        click.echo(f"cluster '{cost.cluster.name}' mixes chips and each chip group is planned on its own: this plan "
                   f"runs on its {cost.chip.id} nodes, priced on {cost.chip.id}, and leaves its {others} nodes out")
    _print_plan(data, out_dir)


def _print_plan(data: dict, out_dir: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from ascend_pd.planner.report import connector_line, versus

    console = Console()
    p = data["predicted"]
    w = data["workload"]
    console.print(f"[bold]{data['model']}[/bold] ({data['quantization']}) on [bold]{data['cluster']}[/bold], "
                  f"budget {data['device_budget']} devices; prompts mean {w['input_tokens']['mean']:g}, outputs mean "
                  f"{w['output_tokens']['mean']:g} tokens; SLO TTFT {data['slo']['ttft_ms']:g} ms, TPOT "
                  f"{data['slo']['tpot_ms']:g} ms at {data['slo']['attainment']:.0%}")
    table = Table(title=f"Plan: {data['kind']}")
    for column in ("role", "instances", "parallel", "devices", "batch / rank", "req/s each"):
        table.add_column(column, justify="right" if column != "role" else "left")
    for role in ("prefill", "decode", "colocated"):
        part = data[role]
        if part:
            s = part["parallel"]
            table.add_row(role, str(part["count"]), f"TP{s['tp']} DP{s['dp']} EP{s['ep']}",
                          str(part["count"] * part["devices_per_instance"]), str(part.get("batch_per_rank", "-")),
                          f"{part['rate_rps_per_instance']:.2f}")
    console.print(table)
    figures = Table(title=f"Predicted at {p['rate_rps']:.2f} req/s")
    figures.add_column("figure")
    figures.add_column("value", justify="right")
    for name, value in (("most it sustains within the SLO", f"{p['max_rate_rps']:.2f} req/s"),
                        ("goodput", f"{p['goodput_rps']:.2f} req/s"),
                        ("goodput per device", f"{p['goodput_per_device']:.4f} req/s"),
                        ("SLO attainment", f"{p['slo_attainment']:.1%}"),
                        ("TTFT p50 / p90 / p99", f"{p['ttft_ms']['p50']:.0f} / {p['ttft_ms']['p90']:.0f} / "
                                                 f"{p['ttft_ms']['p99']:.0f} ms"),
                        ("TPOT", f"{p['tpot_ms']:.1f} ms"),
                        ("output tokens/s per device", f"{p['output_tokens_per_s_per_device']:.1f}"),
                        ("devices used", str(p["devices"]))):
        figures.add_row(name, value)
    console.print(figures)
    cmp = data["comparison"]
    if cmp.get("advantage") is not None:
        console.print(f"{cmp['chosen']} beats the best "
                      f"{'colocated' if cmp['chosen'] == 'disaggregated' else 'disaggregated'} deployment within the "
                      f"same budget by {cmp['advantage']:.0%} per device ({versus(cmp)}).")
    alts = Table(title="Alternatives")
    for column in ("configuration", "req/s", "devices", "req/s per device"):
        alts.add_column(column)
    for alt in data["alternatives"]:
        alts.add_row(alt["label"], f"{alt['rate_rps']:.2f}", str(alt["devices"]), f"{alt['rate_rps_per_device']:.4f}")
    console.print(alts)
    console.print(connector_line(data))
    console.print(f"searched in {data['search_seconds']:.1f} s")
    if out_dir:
        console.print(f"wrote {out_dir}/deployment.yaml, plan.json, report.md, pareto.csv, pareto.png, "
                      "placement.png, deployment.schema.json")
