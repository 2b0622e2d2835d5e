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
    """An endpoint given as --prefill/--decode/--colocated URL; named after its host:port."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise InputError(f"'{url}' is not an http://host:port URL", field=flag,
                         fix=f"write it as {flag} http://10.0.0.1:8000")
    return Endpoint(url=f"{parts.scheme}://{parts.hostname}:{parts.port}", role=role,
                    instance=f"{parts.hostname}:{parts.port}")
