"""`ascend-pd replan`: what a running deployment should change, from what its proxy observed."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ascend_pd.cli.admin_token import admin_token as admin_token_of
from ascend_pd.cli.admin_token import admin_token_options
from ascend_pd.cli.common import calibration_option, input_errors_exit_2
from ascend_pd.planner.replan import HEADROOM, MIN_GAIN, MIN_SAVING, SHRINK_MARGIN

threshold_options = [
    click.option("--headroom", type=click.FloatRange(min=0), default=HEADROOM, show_default=True,
                 help="size for the observed rate times 1 + this (autoscale: the widest margin the load predictor "
                      "adds)"),
    click.option("--min-gain", type=click.FloatRange(0, 1), default=MIN_GAIN, show_default=True,
                 help="SLO attainment a change must add when the deployment misses the SLO"),
    click.option("--min-saving", type=click.FloatRange(0, 1), default=MIN_SAVING, show_default=True,
                 help="share of devices a change must free when the deployment meets the SLO"),
    click.option("--shrink-margin", type=click.FloatRange(min=0), default=SHRINK_MARGIN, show_default=True,
                 help="a smaller deployment must also meet the SLO at the rate times 1 + headroom + this"),
]


def thresholds(fn):
    for option in reversed(threshold_options):
        fn = option(fn)
    return fn


@click.command("replan")
@click.option("--deployment", "deployment_file", required=True, type=click.Path(dir_okay=False),
              help="the running deployment.yaml")
@click.option("--observed", required=True, metavar="URL|FILE",
              help="the proxy's base URL, or a file holding its GET /v1/workload answer (a URL needs the admin "
                   "token: by default the one in the bundle beside --deployment)")
@admin_token_options
@calibration_option
@thresholds
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="write the deployment after the change here (only when a change is proposed)")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
def replan_cmd(deployment_file, observed, admin_token, admin_token_file, calibration, headroom, min_gain, min_saving,
               shrink_margin, out_file, fmt):
    """Propose the smallest change to a running deployment that meets its SLO under the observed workload.

    Fits prompt and output lengths and the arrival rate the proxy measured, corrects the cost model by the TTFT
    and TPOT clients saw, and sizes the deployment's own instance shapes with the planner: instances to start or
    stop, P<->D (or colocated) flips of instances of one shape, placed on free devices. Nothing is proposed when
    the gain is under the thresholds, nor an order of steps that would serve less than the load arriving.
    """
    from ascend_pd.autoscale.observe import observe
    from ascend_pd.deploy import load_deployment
    from ascend_pd.deploy.io import write_deployment
    from ascend_pd.planner.replan import replan

    loaded = load_deployment(deployment_file)
    token = admin_token_of(admin_token, admin_token_file, Path(deployment_file).parent) if "://" in observed else None
    proposal = replan(loaded, observe(observed, token), calibration, headroom, min_gain, min_saving,
                      shrink_margin)
    if out_file and proposal.change:
        write_deployment(proposal.deployment, out_file)
    if fmt == "json":
        click.echo(json.dumps(proposal.as_dict(), indent=2))
        return
    click.echo(render_text(proposal))


def render_text(proposal) -> str:
    def figures(f) -> str:
        p = f.predicted
        return (f"{f.label} on {f.devices} devices: SLO attainment {p['slo_attainment']:.0%}, goodput "
                f"{p['goodput_rps']:.2f} req/s, TTFT p90 {p['ttft_ms']['p90']:.0f} ms, TPOT {p['tpot_ms']:.1f} ms")

    c = proposal.correction
    lines = [("change proposed" if proposal.change else "no change") + ":", *(f"  - {r}" for r in proposal.reasons),
             f"cost model correction: prefill x{c.prefill_scale:.2f}, decode x{c.decode_scale:.2f} ({c.note})",
             f"now   {figures(proposal.current)}"]
    if proposal.target is not None:
        lines.append(f"plan  {figures(proposal.target)}")
    for number, step in enumerate(proposal.steps, start=1):
        served = proposal.capacity[number - 1]["rate_rps"] if proposal.capacity else float("nan")
        lines.append(f"step {number}: {step.describe()} (serves {served:.2f} req/s meanwhile)")
    return "\n".join(lines)
