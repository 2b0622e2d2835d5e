"""`ascend-pd proxy`: serve the OpenAI-compatible PD proxy in front of the instances of a deployment."""

from __future__ import annotations

import logging

import click

from ascend_pd.cli.admin_token import admin_token as admin_token_of
from ascend_pd.cli.common import input_errors_exit_2
from ascend_pd.defaults import PROXY_PORT
from ascend_pd.deploy.secrets import ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV
from ascend_pd.proxy.api_keys import API_KEY_ENV
from ascend_pd.proxy.event_loop import EVENT_LOOPS
from ascend_pd.proxy.settings import BackendTimeouts, ProxySettings
from ascend_pd.proxy.wire.server import ServerLimits

LIMITS = ServerLimits()


@click.command("proxy")
@click.option("--deployment", "deployment_file", type=click.Path(dir_okay=False),
              help="deployment.yaml: backends, flow mode and port come from it")
@click.option("--backend-table", type=click.Path(dir_okay=False), default=None,
              help="file of the backend table: the proxy serves the table in it when there is one (it holds the "
                   "changes made since the deployment file was written), watches it, and writes the newer tables "
                   "it is given through the admin API, so every worker and a restarted one serve the same backends")
@click.option("--prefill", multiple=True, metavar="URL", help="a prefill endpoint (repeatable), instead of a file")
@click.option("--decode", multiple=True, metavar="URL", help="a decode endpoint (repeatable)")
@click.option("--colocated", multiple=True, metavar="URL", help="a colocated endpoint (repeatable)")
@click.option("--mode", type=click.Choice(["pull", "layerwise"]), default=None,
              help="flow for URL backends (default pull); with --deployment it comes from the connector settings")
@click.option("--host", default="0.0.0.0", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=None, help="port to listen on [default: proxy.port of the deployment, "
                                                       f"else {PROXY_PORT}]")
@click.option("--policy", default=None, help="routing policy for P and D: least-loaded, round-robin, random, "
                                             "prefix-affinity [default: proxy.policy of the deployment]")
@click.option("--prefill-policy", default=None, help="routing policy for P only (overrides --policy)")
@click.option("--decode-policy", default=None, help="routing policy for D only (overrides --policy)")
@click.option("--advertise-url", default=None,
              help="layerwise: the URL D instances use to reach this proxy [default: the host_ip of proxy.node in the "
                   "deployment, else http://<host>:<port>]")
@click.option("--tokenizer", type=click.Path(dir_okay=False), default=None,
              help="tokenizer.json for exact prompt token counts (needs the 'tokenizers' package)")
@click.option("--max-inflight", type=click.IntRange(min=1), default=ProxySettings.max_inflight, show_default=True,
              help="requests in flight above which new ones get 429 with Retry-After")
@click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=BackendTimeouts.connect,
              show_default=True,
              help="seconds to connect to a backend")
@click.option("--read-timeout", type=click.FloatRange(min=0, min_open=True), default=BackendTimeouts.read,
              show_default=True,
              help="longest silence from a backend, in seconds (a long prefill is silent)")
@click.option("--total-timeout", type=click.FloatRange(min=0, min_open=True), default=BackendTimeouts.total,
              show_default=True,
              help="seconds a whole backend call may take")
@click.option("--health-timeout", type=click.FloatRange(min=0, min_open=True), default=BackendTimeouts.health,
              show_default=True,
              help="seconds a backend has to answer /health (and the /metrics read for its load); no answer counts "
                   "against it only when it has not answered proxied traffic since the previous check")
@click.option("--prefill-attempts", type=click.IntRange(min=1), default=ProxySettings.prefill_attempts,
              show_default=True,
              help="different P tried before giving up on a prefill")
@click.option("--pair-attempts", type=click.IntRange(min=1), default=ProxySettings.pair_attempts, show_default=True,
              help="fresh prefills on new backends after a D fails before its first token")
@click.option("--health-interval", type=click.FloatRange(min=0), default=ProxySettings.health_interval,
              show_default=True,
              help="seconds between active health checks (0: off)")
@click.option("--engine-load-interval", type=click.FloatRange(min=0), default=ProxySettings.engine_load_interval,
              show_default=True,
              help="seconds between reads of every backend's vLLM /metrics (requests running and waiting), so "
                   "proxy replicas sharing backends route around each other's load (0: off, own load only)")
@click.option("--admin-token", envvar=ADMIN_TOKEN_ENV, default=None,
              help="enables /admin/backends (add, drain, remove) and GET /v1/workload (the live workload, what "
                   "`ascend-pd replan --observed` reads) for 'Authorization: Bearer <token>'; give it through the "
                   "env var or --admin-token-file, since a command line is seen by every user of the host "
                   f"[env: {ADMIN_TOKEN_ENV}]")
@click.option("--admin-token-file", envvar=ADMIN_TOKEN_FILE_ENV, type=click.Path(dir_okay=False), default=None,
              help="as --admin-token, with the token read from this file, readable by its owner only (rendered "
                   f"launchers and pods give the bundle's secrets/admin.token) [env: {ADMIN_TOKEN_FILE_ENV}]")
@click.option("--admin-port", type=click.IntRange(min=1, max=65535), default=None,
              help="serve the admin endpoints on this port only (every worker shares it) and not on the public "
                   "one, with /metrics and /health for scrapes that send the admin token [default: on the public "
                   "port]")
@click.option("--admin-host", default=ProxySettings.admin_host, show_default=True,
              help="address of the --admin-port listener; keep it on loopback, or a network only operators reach")
@click.option("--api-key", "api_keys", multiple=True, envvar=API_KEY_ENV,
              help="a key clients must send as 'Authorization: Bearer <key>' to /v1/completions, "
                   "/v1/chat/completions and /v1/models (repeatable; like vLLM's --api-key) "
                   f"[env: {API_KEY_ENV}, keys separated by spaces]")
@click.option("--api-key-file", type=click.Path(dir_okay=False), default=None,
              help="a file of client API keys, one a line (kept off the command line and the process list)")
@click.option("--ssl-certfile", type=click.Path(dir_okay=False), default=None,
              help="serve HTTPS on the public port with this PEM certificate (chain); needs --ssl-keyfile. "
                   "Layerwise: D is handed an https:// metaserver URL and must trust the certificate")
@click.option("--ssl-keyfile", type=click.Path(dir_okay=False), default=None,
              help="the PEM private key of --ssl-certfile")
@click.option("--public-detail", is_flag=True, default=False,
              help="show /health's backends and serve /metrics to anyone; without it only requests with the "
                   "admin token see them (a probe still gets /health's status code)")
@click.option("--max-connections", type=click.IntRange(min=1), default=LIMITS.max_connections, show_default=True,
              help="open client connections per worker; one more is answered 503 and closed")
@click.option("--max-pipelined", type=click.IntRange(min=1), default=LIMITS.max_pipelined, show_default=True,
              help="requests read ahead on one client connection before the proxy stops reading it")
@click.option("--max-header-bytes", type=click.IntRange(min=1024), default=LIMITS.max_header_bytes,
              show_default=True, help="request line and headers of one request; more is answered 431")
@click.option("--max-body-bytes", type=click.IntRange(min=1), default=LIMITS.max_body_bytes, show_default=True,
              help="body of one request; more is answered 413")
@click.option("--max-buffered-bytes", type=click.IntRange(min=1), default=LIMITS.max_buffered_bytes,
              show_default=True, help="request bodies held at once per worker, over all connections; a body past "
                                      "it is answered 503")
@click.option("--client-read-timeout", type=click.FloatRange(min=0, min_open=True), default=LIMITS.read_timeout,
              show_default=True, help="seconds a client has to send a whole request once it has begun; a slower "
                                      "one is disconnected")
@click.option("--workload-window", type=click.FloatRange(min=1), default=ProxySettings.workload_window,
              show_default=True,
              help="seconds of finished requests GET /v1/workload summarises")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="worker processes sharing the port, each an event loop on its own core, routing with one shared "
                   "view of backend load [default: the cores this process may use]")
@click.option("--event-loop", type=click.Choice(EVENT_LOOPS), default="auto", show_default=True,
              help="auto: uvloop when it is installed (the 'proxy' extra has it), else asyncio's loop")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@input_errors_exit_2
def proxy_cmd(deployment_file, backend_table, prefill, decode, colocated, mode, host, port, policy, prefill_policy,
              decode_policy, advertise_url, tokenizer, max_inflight, connect_timeout, read_timeout, total_timeout,
              health_timeout, prefill_attempts, pair_attempts, health_interval, engine_load_interval, admin_token,
              admin_token_file, admin_port, admin_host, workload_window, workers, event_loop, log_level, **front_door):
    """Serve an OpenAI-compatible proxy that runs each request through a prefill and a decode instance.

    Backends come from --deployment FILE, or from --prefill/--decode/--colocated URLs. Endpoints:
    POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /health, GET /metrics,
    POST /v1/metaserver (layerwise), and /admin/backends and GET /v1/workload when an admin token is set.
    """
    from ascend_pd.proxy.app import ProxyState
    from ascend_pd.proxy.backend_choice import choose_backends
    from ascend_pd.proxy.serve import available_cores, serve
    from ascend_pd.proxy.siblings import Siblings
    from ascend_pd.proxy.tokens import EstimatedTokens, TokenizerTokens

    chosen = choose_backends(deployment_file, prefill, decode, colocated, mode, host, port, policy, advertise_url)
    timeouts = BackendTimeouts(connect=connect_timeout, read=read_timeout, total=total_timeout, health=health_timeout)
    settings = ProxySettings(
        mode=chosen.mode, timeouts=timeouts,
        prefill_policy=prefill_policy or chosen.policy, decode_policy=decode_policy or chosen.policy,
        max_inflight=max_inflight, prefill_attempts=prefill_attempts, pair_attempts=pair_attempts,
        health_interval=health_interval, engine_load_interval=engine_load_interval,
        admin_token=admin_token_of(admin_token, admin_token_file),
        admin_port=admin_port, admin_host=admin_host,
        workload_window=workload_window, metaserver_url=chosen.metaserver_url, backend_table=backend_table,
        **front_door_settings(**front_door))

    def make_proxy(siblings: Siblings | None) -> ProxyState:
        tokens = TokenizerTokens(tokenizer) if tokenizer else EstimatedTokens()
        return ProxyState(chosen.endpoints, settings, tokens, siblings.load if siblings else None, chosen.revision)

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    workers = workers or available_cores()

    def started(loop_name: str) -> None:
        click.echo(f"ascend-pd proxy: {chosen.mode} flow, {chosen.role_counts()} endpoint(s), listening on "
                   f"{host}:{chosen.port}" + (f", admin endpoints on {admin_host}:{admin_port}" if admin_port else "")
                   + f", {workers} worker(s) on the {loop_name} event loop", err=True)

    serve(make_proxy, host, chosen.port, event_loop, workers, started)


def front_door_settings(api_keys, api_key_file, ssl_certfile, ssl_keyfile, public_detail, max_connections,
                        max_pipelined, max_header_bytes, max_body_bytes, max_buffered_bytes,
                        client_read_timeout) -> dict:
    """The ProxySettings fields of the public port's flags."""
    from ascend_pd.proxy.api_keys import read_key_file

    keys = tuple(api_keys) + (read_key_file(api_key_file) if api_key_file else ())
    limits = ServerLimits(max_connections=max_connections, max_pipelined=max_pipelined,
                          max_header_bytes=max_header_bytes, max_body_bytes=max_body_bytes,
                          max_buffered_bytes=max_buffered_bytes, read_timeout=client_read_timeout)
    return {"api_keys": keys, "ssl_certfile": ssl_certfile, "ssl_keyfile": ssl_keyfile,
            "public_detail": public_detail, "limits": limits}
