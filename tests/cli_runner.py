"""`ascend-pd` run in the test's own process with click's CliRunner, answered as subprocess.run answers, without the
second or so a fresh interpreter takes to start. An exception other than SystemExit is what the console script
would print as a traceback: it fails the test."""

from __future__ import annotations

import subprocess
import traceback

import pytest
from click.testing import CliRunner

from ascend_pd.cli.main import cli


def run_cli(*args: str, env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    """`ascend-pd ARGS`: its exit code, stdout and stderr apart. `env` sets variables for the call (None unsets)."""
    result = CliRunner().invoke(cli, list(args), prog_name="ascend-pd", env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        pytest.fail(f"`ascend-pd {' '.join(args)}` raised instead of exiting:\n"
                    + "".join(traceback.format_exception(*result.exc_info)) + result.stderr, pytrace=False)
    return subprocess.CompletedProcess(["ascend-pd", *args], result.exit_code, result.stdout, result.stderr)
