"""The proxy's admin token as the commands take it: from a file (--admin-token-file, or the env var naming one), from
the environment, or from the bundle beside the deployment file. A token in argv is visible to every user of the host
(ps, /proc), so the flag that takes one is kept only for scripts that cannot do otherwise."""

from __future__ import annotations

from pathlib import Path

import click

from ascend_pd.deploy.secrets import ADMIN_TOKEN, ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV, read_secret
from ascend_pd.errors import InputError

FILE_FIX = "give the file render wrote (BUNDLE/secrets/admin.token), or one you made with mode 600"

token_option = click.option(
    "--admin-token", envvar=ADMIN_TOKEN_ENV, default=None,
    help=f"the proxy's admin token itself; prefer --admin-token-file or the env var, since a command line is seen "
         f"by every user of the host [env: {ADMIN_TOKEN_ENV}]")
token_file_option = click.option(
    "--admin-token-file", envvar=ADMIN_TOKEN_FILE_ENV, type=click.Path(dir_okay=False), default=None,
    help=f"file holding the proxy's admin token, readable by its owner only [env: {ADMIN_TOKEN_FILE_ENV}; "
         "default: secrets/admin.token beside --deployment, which render writes]")


def admin_token_options(fn):
    """--admin-token and --admin-token-file, for the commands that call the proxy's admin API."""
    return token_option(token_file_option(fn))


def admin_token(token: str | None, token_file: str | None, bundle: Path | None = None) -> str | None:
    """The token given, or the one in the file given, or (with `bundle`) the one render wrote into the bundle;
    None when there is none."""
    from_file = read_secret(token_file, field="--admin-token-file", fix=FILE_FIX) if token_file else None
    if token and from_file and token != from_file:
        raise InputError("--admin-token and --admin-token-file give different tokens", field="--admin-token-file",
                         fix=f"give one of them (check the environment: {ADMIN_TOKEN_ENV}, {ADMIN_TOKEN_FILE_ENV})")
    if token or from_file:
        return token or from_file
    bundled = bundle / ADMIN_TOKEN if bundle is not None else None
    if bundled is not None and bundled.exists():
        return read_secret(bundled, field="--admin-token-file", fix=FILE_FIX)
    return None
