"""What every command shares: turning InputError into one clear message and exit code 2."""

from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import click

from ascend_pd.errors import InputError

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
