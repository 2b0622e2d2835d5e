"""Backend endpoints as plain data, read from deployment.yaml or from URLs given on the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from ascend_pd.deploy import LoadedDeployment
from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.deploy.layout import engine_ranks
from ascend_pd.errors import InputError

Role = Literal["prefill", "decode", "colocated"]
ROLES: tuple[Role, ...] = ("prefill", "decode", "colocated")


@dataclass(frozen=True)
class Endpoint:
    """One HTTP endpoint of one instance; an instance with external DP has one endpoint per DP rank."""

    url: str  # http://host:port, no trailing slash
    role: Role
    instance: str
    dp_rank: int = 0
    kv: KVAddress | None = None

    @property
    def name(self) -> str:
        return f"{self.instance}/dp{self.dp_rank}"


def endpoints_from_deployment(loaded: LoadedDeployment) -> list[Endpoint]:
    """Every DP rank of every instance, where the deployment's rank layout puts it (deploy/layout.py)."""
    endpoints = []
    for rank in engine_ranks(loaded):
        kv = KVAddress(engine_id=rank.reported_engine_id, host=rank.host, port=rank.kv_port,
                       tp_size=rank.instance.parallel.tp, dp_rank=rank.dp_rank, rank_hosts=rank.rank_hosts)
        endpoints.append(Endpoint(url=rank.url, role=rank.instance.role, instance=rank.instance.name,
                                  dp_rank=rank.dp_rank, kv=kv))
    return endpoints


def endpoint_from_url(url: str, role: Role, flag: str) -> Endpoint:
    """An endpoint given as --prefill/--decode/--colocated URL (or host:port); named after its host:port."""
    canonical = backend_url(url if "://" in url else f"http://{url}", None, flag)
    parts = urlsplit(canonical)
    return Endpoint(url=canonical, role=role, instance=f"{parts.hostname}:{parts.port}")


def backend_url(url: str, source: str | None, field: str) -> str:
    """`url` as the proxy names a backend, http://host:port; InputError naming it when the proxy could not call it
    (its client speaks plain HTTP) or it says more than where the engine listens (a path, a query, credentials)."""
    fix = "write it as http://HOST:PORT, the engine's address (the proxy calls backends over plain HTTP)"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = None
    if parts.scheme != "http":
        raise InputError(f"'{url}': the proxy calls backends over http only, not '{parts.scheme}'", file=source,
                         field=field, fix=fix)
    if not parts.hostname or port is None or parts.username is not None or parts.password is not None \
            or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InputError(f"'{url}' is not a backend address (http://host:port, nothing more)", file=source,
                         field=field, fix=fix)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"http://{host}:{port}"


