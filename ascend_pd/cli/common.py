"""What every command shares: turning InputError into one clear message and exit code 2, and how one-shot commands
run."""

from __future__ import annotations

import functools
import gc
import sys
from typing import Callable, TypeVar

import click

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.errors import InputError
from ascend_pd.perf.calibration import DEFAULT_PROFILE, PAPER_PROFILE

F = TypeVar("F", bound=Callable)

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT = 0, 1, 2


def input_errors_exit_2(fn: F) -> F:
    """Print an InputError as 'error: file:line: field: message / fix' on stderr and exit 2, with no traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InputError as exc:
            click.echo(f"error: {exc.render()}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper  # type: ignore[return-value]


def one_shot(fn: F) -> F:
    """Run a command that builds a large plan and exits without the cyclic garbage collector. Its full passes grow
    with every object alive, so a SuperCluster plan of a hundred thousand objects spent most of its time in them;
    reference counting still frees what the command drops, and the process ends soon after."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper  # type: ignore[return-value]


calibration_option = click.option(
    "--calibration", default=None, metavar="NAME|FILE",
    help=f"cost-model calibration: a shipped profile ({DEFAULT_PROFILE}, the default: vllm-ascend as users run it, "
         f"the engine every rendered deployment runs; {PAPER_PROFILE}: Huawei's optimized stack of the CloudMatrix "
         "paper) or a file `ascend-pd calibrate` wrote")
version_option = click.option(
    "--vllm-ascend-version", "vllm_ascend_version", default=None, metavar="RELEASE",
    help=f"the vllm-ascend release the engines run: its host costs and what its unflagged graph mode and "
         f"scheduling resolve to (default: the deployment's vllm_ascend_version where a deployment is read, else "
         f"{VLLM_ASCEND_RELEASE}, the release render's image holds; plan writes the one it priced)")
