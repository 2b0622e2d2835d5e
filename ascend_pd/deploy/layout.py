"""Every engine rank of a deployment: its devices, the host of each worker, its HTTP and KV ports, its engine id.

The one place these are derived. Render launches what this says, the proxy routes to it and hands D the KV address
of P from it, validate checks its ports, the connector's ports follow `worker_kv_port`, and the autoscaler joins
what it starts through it. Node addresses come from the loaded deployment's cluster (`node_addresses` applied)."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.deploy.io import LoadedDeployment
from ascend_pd.deploy.schema import DevicePlacement, Instance
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.models import get_model


def worker_kv_port(kv_port: int, dp_rank: int, workers_per_rank: int, worker: int) -> int:
    """The side-channel port of one worker: an instance owns kv_port .. kv_port + dp * workers_per_rank - 1, DP rank
    by DP rank, each worker (TP x PP rank inside its DP rank) one port."""
    return kv_port + dp_rank * workers_per_rank + worker


def runs_external_dp(instance: Instance, moe: bool) -> bool:
    """vLLM runs one DP group (external DP, ranks stepping together) only for MoE models; a dense model's DP ranks
    are launched as independent engines, each with its own engine id."""
    return moe and instance.parallel.dp > 1


@dataclass(frozen=True)
class EngineRank:
    """One DP rank of one instance, as every part of the system addresses it."""

    instance: Instance
    index: int  # the instance's position in deployment.instances, for error locations
    dp_rank: int
    placements: tuple[DevicePlacement, ...]  # the nodes it spans, its leader (HTTP, TP rank 0) first
    host: str  # the leader node's address: HTTP endpoint, side channel of TP rank 0
    http_port: int
    kv_port: int  # side channel of worker 0; worker w listens on kv_port + w on worker_hosts[w]
    worker_hosts: tuple[str, ...]  # the address of each worker (TP x PP rank), in rank order
    engine_id: str  # the engine_id written into this engine's kv_transfer_config
    reported_engine_id: str  # as the running engine names itself (vLLM adds _dp<rank> in a DP group)
    external_dp: bool  # one of the ranks of a vLLM DP group, rather than an engine of its own

    @property
    def role(self) -> str:
        return self.instance.role

    @property
    def name(self) -> str:
        return f"{self.instance.name}/dp{self.dp_rank}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def rank_hosts(self) -> tuple[str, ...]:
        """Each TP rank's host when the rank spans nodes; empty when every worker is on `host`."""
        return self.worker_hosts if len(set(self.worker_hosts)) > 1 else ()

    def worker_ports(self) -> list[tuple[int, str, int]]:
        """(worker, host, side-channel port) of every worker of this rank."""
        return [(w, host, self.kv_port + w) for w, host in enumerate(self.worker_hosts)]


def model_is_moe(name: str) -> bool:
    """Whether the model is MoE; a model path that is not on this machine (a proxy node without weights) counts as
    dense, as validate and render on such a node count it."""
    try:
        return get_model(name).is_moe
    except InputError:
        return False


def places_on(instance: Instance, cluster: Cluster) -> bool:
    """Whether every node the instance names is in the cluster (validate lays out only those: APD101 reports the
    others)."""
    return all(cluster.has_node(p.node) for p in instance.devices)


def instance_ranks(instance: Instance, index: int, cluster: Cluster, moe: bool) -> list[EngineRank]:
    """The DP ranks of one instance, deployment.instances[index]; its nodes must be in the cluster."""
    workers = instance.parallel.tp * instance.parallel.pp
    external_dp = runs_external_dp(instance, moe)
    base_id = instance.effective_engine_id
    ranks = []
    for dp_rank, group in enumerate(instance.rank_groups()):
        hosts = tuple(cluster.node(p.node).host_ip for p in group for _ in p.devices)
        rank_id = f"{base_id}_dp{dp_rank}" if instance.parallel.dp > 1 else base_id
        ranks.append(EngineRank(
            instance=instance, index=index, dp_rank=dp_rank, placements=tuple(group), host=hosts[0],
            http_port=instance.http_port + dp_rank, kv_port=worker_kv_port(instance.kv_port, dp_rank, workers, 0),
            worker_hosts=hosts[:workers], engine_id=base_id if external_dp else rank_id,
            reported_engine_id=rank_id, external_dp=external_dp))
    return ranks


def proxy_urls(loaded: LoadedDeployment) -> list[tuple[str, str]]:
    """(node, base URL) of every proxy replica: proxy.node's, then each of proxy.extra_nodes', at proxy.port."""
    proxy, cluster = loaded.deployment.proxy, loaded.cluster()
    return [(node, f"http://{cluster.node(node).host_ip}:{proxy.port}") for node in proxy.nodes]


def engine_ranks(loaded: LoadedDeployment) -> list[EngineRank]:
    """Every DP rank of every instance, instance by instance; a node the cluster does not have is an InputError."""
    cluster = loaded.cluster()
    moe = model_is_moe(loaded.deployment.model.name)
    ranks = []
    for index, instance in enumerate(loaded.deployment.instances):
        for j, placement in enumerate(instance.devices):
            cluster.require_node(placement.node, file=loaded.source, field=f"instances.{index}.devices.{j}.node",
                                 line=loaded.lines.get(("instances", index, "devices", j, "node")))
        ranks += instance_ranks(instance, index, cluster, moe)
    return ranks
