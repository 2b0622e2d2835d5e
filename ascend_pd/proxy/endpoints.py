"""Backend endpoints as plain data, read from deployment.yaml or from URLs given on the command line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from ascend_pd.deploy import LoadedDeployment
from ascend_pd.errors import InputError

Role = Literal["prefill", "decode", "colocated"]
ROLES: tuple[Role, ...] = ("prefill", "decode", "colocated")


@dataclass(frozen=True)
class KVAddress:
    """Where the KV connector of one DP rank listens: what push mode hands to D so it can reach P."""

    engine_id: str
    host: str
    port: int  # side channel of TP rank 0 of this DP rank
    tp_size: int
    dp_rank: int
    # The host of each TP rank when the ranks span nodes; empty when every rank listens on `host`.
    rank_hosts: tuple[str, ...] = ()


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
    """Every DP rank of every instance: http_port + rank on the host_ip of the rank's leader node."""
    deployment = loaded.deployment
    cluster = loaded.cluster()
    endpoints = []
    for index, instance in enumerate(deployment.instances):
        tp = instance.parallel.tp
        for rank, leader, port in instance.endpoints():
            if not cluster.has_node(leader.node):
                raise InputError(f"node '{leader.node}' is not in cluster '{cluster.name}'", file=loaded.source,
                                 field=f"instances.{index}.devices", line=loaded.lines.get(("instances", index)),
                                 fix=f"use a node of {cluster.name} (ascend-pd show {cluster.name})")
            host = cluster.node(leader.node).host_ip
            rank_hosts = [cluster.node(p.node).host_ip for p in instance.rank_groups()[rank] for _ in p.devices]
            kv = KVAddress(engine_id=instance.effective_engine_id, host=host,
                           port=instance.kv_port + rank * tp, tp_size=tp, dp_rank=rank,
                           rank_hosts=tuple(rank_hosts) if len(set(rank_hosts)) > 1 else ())
            endpoints.append(Endpoint(url=f"http://{host}:{port}", role=instance.role, instance=instance.name,
                                      dp_rank=rank, kv=kv))
    return endpoints


def endpoint_from_url(url: str, role: Role, flag: str) -> Endpoint:
    """An endpoint given as --prefill/--decode/--colocated URL; named after its host:port."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
        raise InputError(f"'{url}' is not an http://host:port URL", field=flag,
                         fix=f"write it as {flag} http://10.0.0.1:8000")
    return Endpoint(url=f"{parts.scheme}://{parts.hostname}:{parts.port}", role=role,
                    instance=f"{parts.hostname}:{parts.port}")
