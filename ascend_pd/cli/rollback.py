"""`ascend-pd rollback`: put an earlier revision of a rendered bundle back in place, and say what to run."""

from __future__ import annotations

import time
from pathlib import Path

import click

from ascend_pd.cli.common import input_errors_exit_2
from ascend_pd.errors import InputError


def _kept(revision) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(revision.saved_at))
    return f"kept {when}, when a {revision.reason} replaced it"


def _instances(deployment_file: Path) -> str:
    from ascend_pd.deploy import load_deployment

    deployment = load_deployment(deployment_file).deployment
    return f"{deployment.metadata.name}: " + ", ".join(f"{i.name} ({i.role})" for i in deployment.instances)


def _list(bundle: Path) -> None:
    from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT
    from ascend_pd.render.revisions import check_bundle, revisions

    check_bundle(bundle)
    kept = revisions(bundle)
    click.echo(f"now       {_instances(bundle / BUNDLE_DEPLOYMENT)}")
    for revision in reversed(kept):
        click.echo(f"{revision.number:<9} {_instances(revision.path / BUNDLE_DEPLOYMENT)}  [{_kept(revision)}]")
    if not kept:
        click.echo("no earlier revision: render keeps the bundle it replaces, from the second render into DIR on")


def _holding_the_autoscaler_lock(bundle: Path):
    """The autoscaler's own lock on the bundle, so none runs (or starts) while the files change under it: it would
    reconcile the proxies to instances not started yet, or write its next change over the restored file."""
    from ascend_pd.autoscale.lock import AutoscalerLock
    from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT

    try:
        return AutoscalerLock(bundle / BUNDLE_DEPLOYMENT)
    except InputError as exc:
        raise InputError(f"an autoscaler runs this deployment ({exc.message})", file=str(bundle), field="DIR",
                         fix="stop it first (kill its pid; it ends a change in progress cleanly), roll back, start "
                             "what the rollback says, then start the autoscaler again") from None


@click.command("rollback")
@click.argument("bundle_dir", metavar="DIR")
@click.option("--to", "number", type=click.IntRange(min=1), default=None,
              help="the revision to go back to (see --list) [default: the newest, which undoes the last render or "
                   "rollback]")
@click.option("--list", "listing", is_flag=True,
              help="list the revisions kept in DIR, newest first, and change nothing")
@input_errors_exit_2
def rollback_cmd(bundle_dir: str, number: int | None, listing: bool) -> None:
    """Put an earlier revision of the bundle in DIR back in place.

    Every render into DIR (and every change `ascend-pd autoscale` makes) keeps the bundle it replaces in
    DIR/.revisions/ (the last few). A rollback keeps the bundle it replaces too, so a second rollback undoes the first.
    The secrets and the autoscaler's backend table stay as they are. It changes files only: it prints which
    instances that adds, removes or resizes, and what to run so that the running deployment follows.
    """
    from ascend_pd.deploy import load_deployment
    from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT
    from ascend_pd.render.revisions import check_bundle, chosen_revision, restore_revision
    from ascend_pd.render.rollback_steps import instance_changes, run_steps

    bundle = Path(bundle_dir)
    if listing:
        _list(bundle)
        return
    check_bundle(bundle)
    lock = _holding_the_autoscaler_lock(bundle)
    try:
        target = chosen_revision(bundle, number)
        # both deployments load before a file changes: one that does not leaves the bundle as it was
        load_deployment(bundle / BUNDLE_DEPLOYMENT)
        load_deployment(target.path / BUNDLE_DEPLOYMENT)
        restored = restore_revision(bundle, target.number)
    finally:
        lock.close()
    replaced = restored.saved.path
    before = load_deployment(replaced / BUNDLE_DEPLOYMENT)  # its copy, beside the cluster file it names
    after = load_deployment(bundle / BUNDLE_DEPLOYMENT)
    click.echo(f"{bundle}: back to revision {target.number} ({_kept(target)}); "
               f"the bundle it replaced is revision {restored.saved.number}: `ascend-pd rollback {bundle}` again "
               "undoes this")
    click.echo(f"files: {len(restored.written)} put back, {len(restored.removed)} removed"
               + (f" ({', '.join(restored.removed)})" if restored.removed else ""))
    click.echo("instances:")
    for line in instance_changes(before.deployment, after.deployment).lines():
        click.echo(line)
    for target_name, steps in run_steps(bundle, replaced, before, after).items():
        click.echo(f"to run it ({target_name}):")
        for line in steps:
            click.echo(f"  {line}")
