"""`ascend-pd calibrate`: fit the cost model to `vllm bench serve` results measured on a deployment."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ascend_pd.cli.common import input_errors_exit_2, one_shot, version_option
from ascend_pd.defaults import MTP_ACCEPTANCE
from ascend_pd.perf.calibration import DEFAULT_PROFILE


@click.command("calibrate")
@click.argument("results", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--deployment", "deployment_file", required=True, type=click.Path(dir_okay=False),
              help="the deployment.yaml the results were measured on")
@click.option("--base", default=DEFAULT_PROFILE, show_default=True,
              help="shipped profile whose values the fit starts from and keeps for what it does not fit")
@click.option("--fit", "fit_names", default=None, metavar="NAME,NAME",
              help="calibration values to fit (default: prefill_efficiency from TTFT; step_overhead_s, and with "
                   "three results or more decode_efficiency, from TPOT)")
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=MTP_ACCEPTANCE, show_default=True,
              help="acceptance of each MTP draft token during the measurement (deployments with a draft)")
@version_option
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="write the calibration file here (for --calibration FILE)")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
@one_shot
def calibrate_cmd(results, deployment_file, base, fit_names, mtp_acceptance, vllm_ascend_version, out_file,
                  fmt) -> None:
    """Fit calibration values to RESULTS, the JSON files `vllm bench serve --save-result` wrote.

    Prints each fitted value, the residual of every input and its leave-one-out error (the input predicted by a
    fit to the others), and writes a file that estimate, plan and simulate take with --calibration FILE.
    Measure at several concurrencies; TTFT is best measured at low concurrency.
    """
    from ascend_pd.planner.fit_to_bench import calibrate, calibration_file

    names = [n.strip() for n in fit_names.split(",") if n.strip()] if fit_names else None
    result = calibrate(deployment_file, results, base, names, mtp_acceptance, vllm_ascend_version)
    if out_file:
        Path(out_file).write_text(calibration_file(result, base, deployment_file, results), encoding="utf-8")
    rows = [{"input": row.label, "measured_ms": row.measured * 1e3, "predicted_ms": predicted * 1e3,
             "residual": err, "leave_one_out": loo}
            for (row, predicted, err), loo in zip(result.residuals, result.leave_one_out)]
    if fmt == "json":
        click.echo(json.dumps({"base": base, "values": result.values, "at_bounds": result.at_bounds, "rows": rows,
                               "out": out_file}, indent=2))
        return
    _print_text(base, result.values, rows, out_file)
    from ascend_pd.perf.fitting import BOUNDS

    for name in result.at_bounds:
        low, high = BOUNDS[name]
        click.echo(f"warning: {name} ended at {result.values[name]:.3g}, an end of its range {low:g} to {high:g}: "
                   "the measurements push it further, so this value cannot explain them. Fit other values (--fit), "
                   "or check that --deployment is what ran.", err=True)


def _print_text(base: str, values: dict, rows: list[dict], out_file: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    fitted = Table(title=f"Fitted over the '{base}' profile")
    fitted.add_column("value")
    fitted.add_column("fitted", justify="right")
    for name, value in values.items():
        fitted.add_row(name, f"{value:.4g}")
    console.print(fitted)
    table = Table(title="Every input")
    for column in ("input", "measured", "predicted", "residual", "leave-one-out"):
        table.add_column(column, justify="left" if column == "input" else "right")
    for row in rows:
        out = "-" if row["leave_one_out"] is None else f"{row['leave_one_out']:+.1%}"
        table.add_row(row["input"], f"{row['measured_ms']:.1f} ms", f"{row['predicted_ms']:.1f} ms",
                      f"{row['residual']:+.1%}", out)
    console.print(table)
    if out_file:
        console.print(f"wrote {out_file}; use it with --calibration {out_file}")
