"""`ascend-pd check`: is a running deployment serving as it says? A row per engine rank and proxy replica, a canary
through the proxy, and the canary's KV seen on D."""

from __future__ import annotations

import json
import os
import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ascend_pd.cli.admin_token import admin_token
from ascend_pd.cli.common import EXIT_FINDINGS, EXIT_OK, input_errors_exit_2
from ascend_pd.deploy.check.run import Limits
from ascend_pd.deploy.secrets import ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV, API_KEY_ENV, read_key_file

seconds = click.FloatRange(min=0, min_open=True)


@click.command("check")
@click.argument("target", type=click.Path(exists=True))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table for people, json for tools (the same fields)")
@click.option("--timeout", type=seconds, default=Limits.timeout, show_default=True,
              help="seconds each call to an engine or proxy may take (/health, /v1/models, /version, /metrics)")
@click.option("--canary-timeout", type=seconds, default=Limits.canary_timeout, show_default=True,
              help="seconds the canary completion may take through the proxy")
@click.option("--metrics-wait", type=click.FloatRange(min=0), default=Limits.metrics_wait, show_default=True,
              help="seconds to wait for D's /metrics to show the canary's KV (vLLM publishes them on its next "
                   "stats update)")
@click.option("--api-key-file", type=click.Path(dir_okay=False), default=None,
              help=f"file with the proxy's client API key, when it asks for one [default: ${API_KEY_ENV}, the "
                   "first key]")
@input_errors_exit_2
def check_cmd(target: str, fmt: str, timeout: float, canary_timeout: float, metrics_wait: float,
              api_key_file: str | None) -> None:
    """Check the deployment TARGET (a bundle directory render wrote, or a deployment.yaml) where it runs.

    Each engine rank: /health answers 200, /v1/models lists the model, /version is in the pinned range, the proxy
    routes it in its role. Each proxy replica: /health answers 200. Then one completion through the proxy and, for
    a prefill/decode deployment, D's metrics showing that its prompt KV came from P. The admin token (for the
    proxy's backend list) is the bundle's secrets/admin.token, or the file $ASCEND_PD_PROXY_ADMIN_TOKEN_FILE
    names, or $ASCEND_PD_PROXY_ADMIN_TOKEN.

    Exit status: 0 every check passed, 1 a check failed, 2 bad input.
    """
    from ascend_pd.deploy.check import Secrets, load_target, run_check

    loaded, directory = load_target(target)
    secrets = Secrets(admin_token=admin_token(os.environ.get(ADMIN_TOKEN_ENV), os.environ.get(ADMIN_TOKEN_FILE_ENV),
                                              directory),
                      api_key=_api_key(api_key_file))
    report = run_check(loaded, secrets, Limits(timeout, canary_timeout, metrics_wait))
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print(report)
    sys.exit(EXIT_OK if report.ok else EXIT_FINDINGS)


def _api_key(api_key_file: str | None) -> str | None:
    if api_key_file is not None:
        return read_key_file(api_key_file)[0]
    keys = os.environ.get(API_KEY_ENV, "").split()
    return keys[0] if keys else None


def _print(report) -> None:
    """The rows as a table, then the canary and the KV evidence; what failed in red. Every text from the report is
    escaped: a detail or version may hold brackets that rich would take for markup."""
    console = Console()
    table = Table(title=escape(f"{report.deployment} ({report.source}); engines pinned to {report.pin}"))
    for column in ("name", "role", "address", "health", "version", "detail"):
        table.add_column(column, overflow="fold")
    for row in report.engines + report.proxies:
        style = "" if row.ok else "red"
        table.add_row(*(escape(text) for text in (row.name, row.role, row.address)),
                      Text(row.health, style=style if row.health == "failed" else ""), escape(row.version),
                      Text(row.detail, style=style))
    console.print(table)
    for label, finding in (("canary", report.canary), ("KV from P", report.kv_from_prefill)):
        console.print(Text(f"{label}: {finding.status}: {finding.detail}", style="" if finding.ok else "red"))
    console.print(Text("all checks passed") if report.ok else Text(f"{report.failures} check(s) failed", style="red"))
