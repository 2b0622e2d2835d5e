"""`ascend-pd validate`: check a deployment.yaml against its cluster and model; exit 0 clean, 1 errors, 2 bad input."""

from __future__ import annotations

import json
import sys

import click

from ascend_pd.cli.common import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, one_shot
from ascend_pd.errors import InputError


@click.command("validate")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text for people, json for tools")
@click.option("--list-rules", is_flag=True, help="print every rule code with what it checks, then exit")
@one_shot
def validate_cmd(file: str | None, fmt: str, list_rules: bool) -> None:
    """Check FILE (a deployment.yaml) and print its diagnostics.

    Exit status: 0 no errors (warnings and infos may be printed), 1 errors found, 2 the file could not be read.
    """
    from ascend_pd.deploy import has_errors, validate_file
    from ascend_pd.deploy.rules.base import CODES

    if list_rules:
        for code, summary in sorted(CODES.items()):
            click.echo(f"{code}  {summary}")
        sys.exit(EXIT_OK)
    if file is None:
        raise click.UsageError("give the deployment file to check, e.g. `ascend-pd validate deployment.yaml`")
    try:
        _, diagnostics = validate_file(file)
    except InputError as exc:
        if fmt == "json":
            click.echo(json.dumps({"file": file, "valid": False, "input_error": {
                "message": exc.message, "file": exc.file, "line": exc.line, "field": exc.field, "fix": exc.fix}},
                indent=2))
        else:
            click.echo(f"error: {exc.render()}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    failed = has_errors(diagnostics)
    if fmt == "json":
        click.echo(json.dumps({"file": file, "valid": not failed,
                               "diagnostics": [d.to_dict() for d in diagnostics]}, indent=2))
    else:
        for diagnostic in diagnostics:
            click.echo(diagnostic.render(file))
        counts = {s: sum(d.severity == s for d in diagnostics) for s in ("error", "warning", "info")}
        summary = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info"
        click.echo(f"{file}: {'INVALID' if failed else 'ok'} ({summary})")
    sys.exit(EXIT_FINDINGS if failed else EXIT_OK)
