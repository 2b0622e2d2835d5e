"""`ascend-pd proxy`: serve the OpenAI-compatible PD proxy in front of the instances of a deployment."""

from __future__ import annotations

import errno
import logging

import click

from ascend_pd.cli.common import input_errors_exit_2
from ascend_pd.errors import InputError
from ascend_pd.proxy.event_loop import EVENT_LOOPS

WILDCARDS = ("0.0.0.0", "::", "")


@click.command("proxy")
@click.option("--deployment", "deployment_file", type=click.Path(dir_okay=False),
              help="deployment.yaml: backends, flow mode and port come from it")
@click.option("--prefill", multiple=True, metavar="URL", help="a prefill endpoint (repeatable), instead of a file")
@click.option("--decode", multiple=True, metavar="URL", help="a decode endpoint (repeatable)")
@click.option("--colocated", multiple=True, metavar="URL", help="a colocated endpoint (repeatable)")
@click.option("--mode", type=click.Choice(["pull", "layerwise"]), default=None,
              help="flow for URL backends (default pull); with --deployment it comes from the connector settings")
@click.option("--host", default="0.0.0.0", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=None, help="port to listen on [default: proxy.port of the deployment, "
                                                       "else 8080]")
@click.option("--policy", default=None, help="routing policy for P and D: least-loaded, round-robin, random, "
                                             "prefix-affinity [default: proxy.policy of the deployment]")
@click.option("--prefill-policy", default=None, help="routing policy for P only (overrides --policy)")
@click.option("--decode-policy", default=None, help="routing policy for D only (overrides --policy)")
@click.option("--advertise-url", default=None,
              help="layerwise: the URL D instances use to reach this proxy [default: the host_ip of proxy.node in the "
                   "deployment, else http://<host>:<port>]")
@click.option("--tokenizer", type=click.Path(dir_okay=False), default=None,
              help="tokenizer.json for exact prompt token counts (needs the 'tokenizers' package)")
@click.option("--max-inflight", type=click.IntRange(min=1), default=1024, show_default=True,
              help="requests in flight above which new ones get 429 with Retry-After")
@click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="seconds to connect to a backend")
@click.option("--read-timeout", type=click.FloatRange(min=0, min_open=True), default=300.0, show_default=True,
              help="longest silence from a backend, in seconds (a long prefill is silent)")
@click.option("--total-timeout", type=click.FloatRange(min=0, min_open=True), default=3600.0, show_default=True,
              help="seconds a whole backend call may take")
@click.option("--prefill-attempts", type=click.IntRange(min=1), default=3, show_default=True,
              help="different P tried before giving up on a prefill")
@click.option("--pair-attempts", type=click.IntRange(min=1), default=3, show_default=True,
              help="fresh prefills on new backends after a D fails before its first token")
@click.option("--health-interval", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="seconds between active health checks (0: off)")
@click.option("--admin-token", envvar="ASCEND_PD_PROXY_ADMIN_TOKEN", default=None,
              help="enables /admin/backends (add, drain, remove) for 'Authorization: Bearer <token>' "
                   "[env: ASCEND_PD_PROXY_ADMIN_TOKEN]")
@click.option("--event-loop", type=click.Choice(EVENT_LOOPS), default="auto", show_default=True,
              help="auto: uvloop when it is installed (the 'proxy' extra has it), else asyncio's loop")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@input_errors_exit_2
def proxy_cmd(deployment_file, prefill, decode, colocated, mode, host, port, policy, prefill_policy,
              decode_policy, advertise_url, tokenizer, max_inflight, connect_timeout, read_timeout, total_timeout,
              prefill_attempts, pair_attempts, health_interval, admin_token, event_loop, log_level):
    """Serve an OpenAI-compatible proxy that runs each request through a prefill and a decode instance.

    Backends come from --deployment FILE, or from --prefill/--decode/--colocated URLs. Endpoints:
    POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,
    POST /v1/metaserver (layerwise), and /admin/backends when an admin token is set.
    """
    from aiohttp import web

    from ascend_pd.proxy.app import Proxy, build_app
    from ascend_pd.proxy.endpoints import endpoint_from_url, endpoints_from_deployment
    from ascend_pd.proxy.event_loop import new_event_loop
    from ascend_pd.proxy.memory_trace import install_from_environment
    from ascend_pd.proxy.settings import ProxySettings, Timeouts, mode_for
    from ascend_pd.proxy.tokens import EstimatedTokens, TokenizerTokens

    urls = [(u, "prefill", "--prefill") for u in prefill] + [(u, "decode", "--decode") for u in decode] + \
           [(u, "colocated", "--colocated") for u in colocated]
    if deployment_file and urls:
        raise InputError("give backends either with --deployment or with URLs, not both", field="--deployment",
                         fix="drop --prefill/--decode/--colocated, or drop --deployment")
    if deployment_file:
        if mode:
            raise InputError("the flow comes from the deployment's connector settings", field="--mode",
                             fix="drop --mode, or change connector.mode in the deployment")
        from ascend_pd.deploy import load_deployment

        loaded = load_deployment(deployment_file)
        endpoints = endpoints_from_deployment(loaded)
        mode = mode_for(loaded.deployment)
        port = port if port is not None else loaded.deployment.proxy.port
        policy = policy or loaded.deployment.proxy.policy
        if mode == "layerwise" and advertise_url is None:
            cluster, node = loaded.cluster(), loaded.deployment.proxy.node
            if not cluster.has_node(node):
                raise InputError(f"node '{node}' is not in cluster '{cluster.name}'", file=loaded.source,
                                 field="proxy.node", line=loaded.lines.get(("proxy", "node")),
                                 fix="name a node of the cluster, or pass --advertise-url")
            advertise_url = f"http://{cluster.node(node).host_ip}:{port}"
    elif urls:
        endpoints = [endpoint_from_url(url, role, flag) for url, role, flag in urls]
        mode = "colocated" if not (prefill and decode) else (mode or "pull")
        if not colocated and not (prefill and decode):
            raise InputError("a PD proxy needs at least one --prefill and one --decode", field="--decode",
                             fix="add --prefill URL and --decode URL (or --colocated URL)")
    else:
        raise InputError("no backends given", field="--deployment",
                         fix="pass --deployment deployment.yaml, or --prefill URL --decode URL")
    port = port if port is not None else 8080
    policy = policy or "least-loaded"
    if mode == "layerwise" and advertise_url is None:
        if host in WILDCARDS:
            raise InputError(f"D instances must call this proxy back, and {host or 'the wildcard'} is not an "
                             "address they can reach", field="--advertise-url",
                             fix="pass --advertise-url http://<proxy ip>:<port>, or --host <proxy ip>")
        advertise_url = f"http://{host}:{port}"
    settings = ProxySettings(
        mode=mode, timeouts=Timeouts(connect=connect_timeout, read=read_timeout, total=total_timeout),
        prefill_policy=prefill_policy or policy, decode_policy=decode_policy or policy, max_inflight=max_inflight,
        prefill_attempts=prefill_attempts, pair_attempts=pair_attempts, health_interval=health_interval,
        admin_token=admin_token,
        metaserver_url=f"{advertise_url.rstrip('/')}/v1/metaserver" if mode == "layerwise" else None)
    tokens = TokenizerTokens(tokenizer) if tokenizer else EstimatedTokens()
    proxy = Proxy(endpoints, settings, tokens)
    try:
        loop, loop_name = new_event_loop(event_loop)
    except RuntimeError as exc:
        raise InputError(str(exc), field="--event-loop", fix="pip install uvloop, or pass --event-loop asyncio") \
            from None
    install_from_environment(loop)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    roles = ", ".join(f"{sum(e.role == r for e in endpoints)} {r}" for r in ("prefill", "decode", "colocated"))
    click.echo(f"ascend-pd proxy: {mode} flow, {roles} endpoint(s), listening on {host}:{port}, {loop_name} event "
               "loop", err=True)
    try:
        web.run_app(build_app(proxy), host=host, port=port, handler_cancellation=True, access_log=None,
                    print=None, loop=loop)
    except OSError as exc:  # raised while binding, before any request is served
        raise _listen_error(host, port, exc) from None


def _listen_error(host: str, port: int, exc: OSError) -> InputError:
    if exc.errno == errno.EADDRINUSE:
        return InputError(f"port {port} is already in use on {host}", field="--port",
                          fix=f"stop the process listening there (ss -ltnp 'sport = :{port}'), or pass another --port")
    return InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--host",
                      fix="pass an address of this machine, or 0.0.0.0 for all of them")
