"""`check` from start to end: every engine rank and proxy replica at once, then the canary through the first healthy
replica with the decode ranks' counters read around it. Addresses come from the one rank layout (deploy/layout.py)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd.deploy.check.canary import send_canary
from ascend_pd.deploy.check.kv_evidence import await_evidence, read_decodes
from ascend_pd.deploy.check.pins import pin_for
from ascend_pd.deploy.check.probes import check_engine, check_proxy
from ascend_pd.deploy.check.report import CheckReport, Finding, Row
from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT, LoadedDeployment, load_deployment
from ascend_pd.deploy.layout import EngineRank, engine_ranks, proxy_urls
from ascend_pd.errors import InputError
from ascend_pd.hardware.platform import nodes_platform

MAX_PROBES_AT_ONCE = 32


@dataclass(frozen=True)
class Limits:
    """Seconds. Every call is bounded: a dead or black-holed peer costs its row `timeout`, never a hang."""

    timeout: float = 5.0  # each /health, /v1/models, /version and /metrics call
    canary_timeout: float = 30.0  # the canary's whole answer, prefill and decode
    metrics_wait: float = 15.0  # how long D's counters may take to show the canary's KV


@dataclass(frozen=True)
class Secrets:
    admin_token: str | None = field(default=None, repr=False)  # lets the proxy list its backends
    api_key: str | None = field(default=None, repr=False)  # the proxy's client key, when it asks for one


def run_check(loaded: LoadedDeployment, secrets: Secrets, limits: Limits = Limits()) -> CheckReport:
    deployment = loaded.deployment
    ranks = engine_ranks(loaded)
    platform = nodes_platform(loaded.cluster(), {p.node for i in deployment.instances for p in i.devices},
                              loaded.source)
    pin = pin_for(platform)
    model = deployment.served_model_name
    replicas = proxy_urls(loaded)
    with ThreadPoolExecutor(max_workers=min(MAX_PROBES_AT_ONCE, len(ranks) + len(replicas))) as pool:
        checked = list(pool.map(lambda r: check_proxy(*r, limits.timeout, secrets.admin_token), replicas))
        proxies = tuple(row for row, _ in checked)
        view = next((v for _, v in checked if v is not None), None)
        engines = tuple(pool.map(lambda rank: check_engine(rank, model, pin, limits.timeout, view), ranks))
    canary, kv = _canary_and_kv(loaded, ranks, engines, replicas, proxies, secrets, limits)
    return CheckReport(deployment=deployment.metadata.name, source=loaded.source,
                       pin=pin.describe() if pin else "none stated", engines=engines, proxies=proxies,
                       canary=canary, kv_from_prefill=kv)


def _canary_and_kv(loaded: LoadedDeployment, ranks: list[EngineRank], engines: tuple[Row, ...],
                   replicas: list[tuple[str, str]], proxies: tuple[Row, ...], secrets: Secrets,
                   limits: Limits) -> tuple[Finding, Finding]:
    healthy = [(row.name, url) for row, (_, url) in zip(proxies, replicas) if row.ok]
    roles = {rank.role for rank in ranks}
    kv_applies = {"prefill", "decode"} <= roles
    if not healthy:
        skipped = Finding("skipped", "no canary: no proxy replica is healthy")
        return Finding("failed", "no proxy replica is healthy to send it through"), \
            skipped if kv_applies else _not_applicable()
    # the decode ranks that answered /health: one that did not would cost every read its timeout, and says nothing
    answering = {row.name for row in engines if row.health == "ok"}
    decodes = {rank.name: rank.url for rank in ranks if rank.role == "decode" and rank.name in answering}
    before = read_decodes(decodes, limits.timeout) if kv_applies else {}
    name, url = healthy[0]
    canary = send_canary(name, url, loaded.deployment.served_model_name, secrets.api_key, limits.canary_timeout)
    if not kv_applies:
        return canary, _not_applicable()
    if not canary.ok:
        return canary, Finding("skipped", "not read: the canary failed")
    ascend_pd_connector = loaded.deployment.connector.implementation == "ascend-pd"
    return canary, await_evidence(decodes, before, ascend_pd_connector, limits.timeout, limits.metrics_wait)


def _not_applicable() -> Finding:
    return Finding("not applicable", "no prefill and decode pair: every instance computes its own prompts")


def load_target(path: str | Path) -> tuple[LoadedDeployment, Path]:
    """The deployment at `path`, a bundle directory or a deployment file, and the directory its secrets would be
    under (the bundle's, or the file's own)."""
    path = Path(path)
    if not path.is_dir():
        return load_deployment(path), path.parent
    if not (path / BUNDLE_DEPLOYMENT).is_file():
        raise InputError(f"the directory has no {BUNDLE_DEPLOYMENT}", file=str(path), field="BUNDLE",
                         fix="give the directory `ascend-pd render --out` wrote, or a deployment.yaml")
    return load_deployment(path / BUNDLE_DEPLOYMENT), path
