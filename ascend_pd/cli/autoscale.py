"""`ascend-pd autoscale`: observe a running deployment's proxy, re-plan, and apply the change on an interval."""

from __future__ import annotations

import sys
from contextlib import closing
from pathlib import Path

import click

from ascend_pd.autoscale.bounds import Bounds, check_bounds, parse_role_counts
from ascend_pd.autoscale.predictor import PREDICTORS
from ascend_pd.autoscale.settings import DEFAULT_KUBECTL, DEFAULT_NODE_COMMAND, AutoscaleSettings, RolloutTimeouts
from ascend_pd.cli.common import calibration_option, input_errors_exit_2
from ascend_pd.cli.admin_token import admin_token as admin_token_of
from ascend_pd.cli.admin_token import admin_token_options
from ascend_pd.cli.replan import thresholds
from ascend_pd.errors import InputError


@click.command("autoscale")
@click.option("--deployment", "deployment_file", required=True, type=click.Path(dir_okay=False, exists=True),
              help="the running deployment.yaml, in the bundle `ascend-pd render` wrote (its launchers start and "
                   "stop instances); it is rewritten after every change")
@click.option("--proxy", "proxy_urls", multiple=True,
              help="base URL of a proxy replica (repeatable; admin token required) [default: every replica the "
                   "deployment names, proxy.node and proxy.extra_nodes, at proxy.port]")
@admin_token_options
@click.option("--interval", type=click.FloatRange(min=0.1), default=AutoscaleSettings.interval, show_default=True,
              help="seconds between observations (the proxy's --workload-window should be at least this)")
@click.option("--agree", type=click.IntRange(min=1), default=AutoscaleSettings.agree, show_default=True,
              help="intervals in a row that must propose the same change before it is applied (one when the "
                   "deployment misses the SLO at the observed rate itself)")
@click.option("--cooldown", type=click.FloatRange(min=0), default=AutoscaleSettings.cooldown, show_default=True,
              help="seconds after a change before another may start")
@click.option("--target", type=click.Choice(["bash", "k8s"]), default="bash", show_default=True,
              help="bash: the bundle's launch/stop scripts through --node-command; k8s: kubectl apply/delete of the "
                   "instance manifests")
@click.option("--node-command", default=DEFAULT_NODE_COMMAND, show_default=True,
              help="prefix that runs a command on a node ({host}: its IP, {node}: its name); '' runs it here. It "
                   "runs the bundle's scripts at the bundle's path: share it, or give --copy-command")
@click.option("--copy-command", default="", show_default=True,
              help="command run here before an instance starts on a node, to put the bundle (rewritten for the "
                   "change) at the same path there ({bundle}, {host}, {node}); e.g. "
                   "'rsync -a --delete {bundle}/ {host}:{bundle}/'. '' for a shared file system")
@click.option("--kubectl", default=DEFAULT_KUBECTL, show_default=True, help="kubectl command (add -n NAMESPACE here)")
@click.option("--start-timeout", type=click.FloatRange(min=1), default=RolloutTimeouts.start, show_default=True,
              help="seconds a new instance has to answer /health")
@click.option("--drain-timeout", type=click.FloatRange(min=1), default=RolloutTimeouts.drain, show_default=True,
              help="seconds a drained instance has to finish its requests")
@click.option("--log", "log_file", type=click.Path(dir_okay=False), default=None,
              help="JSON-lines log of every decision and rollout phase [default: autoscale.jsonl in the bundle]")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=0, show_default=True,
              help="serve the decisions as Prometheus metrics on this port (0: off)")
@click.option("--intervals", type=click.IntRange(min=1), default=None, help="stop after this many intervals")
@click.option("--dry-run", is_flag=True, help="decide and log, never apply")
@click.option("--predictor", type=click.Choice(PREDICTORS), default=AutoscaleSettings.predictor, show_default=True,
              help="how the rate to size for comes from the windows so far (last-window: the last one times 1 + "
                   "--headroom)")
@click.option("--min-instances", multiple=True, metavar="ROLE=N",
              help="fewest instances of a role (repeatable; default 1 for each role the deployment has); an idle "
                   "deployment shrinks to these")
@click.option("--max-instances", multiple=True, metavar="ROLE=N", help="most instances of a role (repeatable)")
@click.option("--max-devices", type=click.IntRange(min=1), default=None,
              help="most devices the deployment may take [default: the whole cluster]")
@click.option("--reversal-hold", type=click.FloatRange(min=0), default=AutoscaleSettings.reversal_hold,
              show_default=True,
              help="seconds after a change during which going back to what it left waits, unless the SLO is missed")
@calibration_option
@thresholds
@input_errors_exit_2
def autoscale_cmd(deployment_file, proxy_urls, admin_token, admin_token_file, interval, agree, cooldown, target,
                  node_command, copy_command, kubectl, start_timeout, drain_timeout, log_file, metrics_port, intervals,
                  dry_run, predictor, min_instances, max_instances, max_devices, reversal_hold, calibration, headroom,
                  min_gain, min_saving, shrink_margin):
    """Keep a running deployment sized for its live traffic.

    Every interval: make every proxy replica serve the backend table the deployment file gives (backends.json in
    the bundle; on k8s also the backends ConfigMap), read the replicas' workload windows, predict the rate, re-plan
    as `ascend-pd replan` does, and once the same change has been proposed --agree intervals in a row (and
    --cooldown has passed) apply it: new instances start from the bundle's launchers and join every replica when
    healthy; leaving ones are drained, wait for their last request (and a prefill instance for the KV it still
    holds), leave and stop. A failed step puts back what it took and leaves file, proxies and processes agreeing.
    SIGINT or SIGTERM ends a change in progress the same way and exits (a second signal: at once).
    """
    from ascend_pd.autoscale.lock import AutoscalerLock
    from ascend_pd.autoscale.loop import AutoscaleMetrics, Autoscaler, stopping_on_signals
    from ascend_pd.autoscale.proxy_admin import Interrupted
    from ascend_pd.autoscale.rollout import Launcher, RolloutLog
    from ascend_pd.autoscale.stores import replica_urls, table_store
    from ascend_pd.deploy import load_deployment

    _check_template("--node-command", node_command, ("host", "node"))
    _check_template("--copy-command", copy_command, ("bundle", "host", "node"))
    bounds = Bounds(parse_role_counts(min_instances, "--min-instances"),
                    parse_role_counts(max_instances, "--max-instances"), max_devices)
    check_bounds(bounds)
    deployment = Path(deployment_file)
    bundle = deployment.parent
    if target == "bash" and not any(bundle.glob("launch-*.sh")):
        raise InputError("no launch scripts beside the deployment file", file=str(deployment), field="--deployment",
                         fix=f"render it there first: ascend-pd render {deployment} --out {bundle}")
    token = admin_token_of(admin_token, admin_token_file, bundle)  # by default the one render wrote into the bundle
    lock = AutoscalerLock(deployment)  # before anything it starts: a second autoscaler is refused here
    try:
        metrics = AutoscaleMetrics()
    except ImportError:
        raise InputError("autoscale needs prometheus-client", field="autoscale",
                         fix="pip install 'ascend-pd[proxy]'") from None
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, registry=metrics.registry)
    settings = AutoscaleSettings(interval=interval, agree=agree, cooldown=cooldown, headroom=headroom,
                                 min_gain=min_gain, min_saving=min_saving, shrink_margin=shrink_margin,
                                 calibration=calibration, dry_run=dry_run, predictor=predictor, bounds=bounds,
                                 reversal_hold=reversal_hold)
    launcher = Launcher(bundle, target, node_command, kubectl, copy_command=copy_command)
    loaded = load_deployment(deployment)
    proxies = list(proxy_urls) or replica_urls(loaded)
    store = table_store(loaded, bundle, target, kubectl)
    with closing(lock), open(log_file or bundle / "autoscale.jsonl", "a", encoding="utf-8") as stream:
        log = RolloutLog(_Tee(stream))
        scaler = Autoscaler(deployment, proxies, token, launcher, settings, log, metrics,
                            RolloutTimeouts(start=start_timeout, drain=drain_timeout), store=store)
        try:
            with stopping_on_signals():
                scaler.run(intervals)
        except Interrupted as stop:
            log.write(phase="autoscale", status="stopped", reason=str(stop))


class _Tee:
    """The JSON lines go to the log file and to stderr."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> None:
        self._stream.write(text)
        sys.stderr.write(text)

    def flush(self) -> None:
        self._stream.flush()
        sys.stderr.flush()


def _check_template(option: str, template: str, fields: tuple[str, ...]) -> None:
    """A command template fills only `fields`: say so now, not at the first change."""
    try:
        template.format(**{name: "x" for name in fields})
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"'{template}' cannot be filled in: {exc!r}", field=option,
                         fix="use only " + ", ".join(f"{{{name}}}" for name in fields) + " (double other braces)") \
            from None
