"""Entry point of the `ascend-pd` console script."""

from __future__ import annotations

import click

from ascend_pd import __version__
from ascend_pd.cli.lazy import LazyGroup

# name -> "module:command". Each command lives in its own module and is imported only when it runs.
COMMANDS = {
    "validate": "ascend_pd.cli.validate:validate_cmd",
    "clusters": "ascend_pd.cli.catalog:clusters_cmd",
    "cluster": "ascend_pd.cli.cluster:cluster_cmd",
    "models": "ascend_pd.cli.catalog:models_cmd",
    "show": "ascend_pd.cli.catalog:show_cmd",
    "render": "ascend_pd.cli.render:render_cmd",
    "ranktable": "ascend_pd.cli.ranktable:ranktable_cmd",
    "preflight": "ascend_pd.cli.preflight:preflight_cmd",
    "check": "ascend_pd.cli.check:check_cmd",
    "proxy": "ascend_pd.cli.proxy:proxy_cmd",
    "estimate": "ascend_pd.cli.estimate:estimate_cmd",
    "plan": "ascend_pd.cli.plan:plan_cmd",
    "simulate": "ascend_pd.cli.simulate:simulate_cmd",
    "calibrate": "ascend_pd.cli.calibrate:calibrate_cmd",
    "replan": "ascend_pd.cli.replan:replan_cmd",
    "autoscale": "ascend_pd.cli.autoscale:autoscale_cmd",
    "rollback": "ascend_pd.cli.rollback:rollback_cmd",
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ascend-pd")
def cli() -> None:
    """Plan, check, render and serve prefill/decode disaggregated vLLM deployments on Ascend NPUs.

    Shell completion (bash): eval "$(_ASCEND_PD_COMPLETE=bash_source ascend-pd)"
    """


if __name__ == "__main__":
    cli(prog_name="ascend-pd")
