"""What preflight checks on this node, worked out from the deployment, and the run over every check."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.deploy.io import LoadedDeployment
from ascend_pd.deploy.preflight import checks
from ascend_pd.deploy.preflight.result import CheckResult
from ascend_pd.deploy.rules.base import Context
from ascend_pd.deploy.rules.ports import port_claims
from ascend_pd.hardware import Cluster, Node


@dataclass(frozen=True)
class Site:
    """Where this node keeps what the checks read (tests point these at stand-ins)."""

    ascend_root: Path = Path("/usr/local/Ascend")
    hccn_conf: Path = Path("/etc/hccn.conf")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout_s: float = 30.0


@dataclass(frozen=True)
class Peer:
    local_device: int
    node: str
    device: int
    ip: str


@dataclass(frozen=True)
class Target:
    """What this node must serve; empty when preflight runs without a deployment."""

    cluster: Cluster | None = None
    node: Node | None = None
    devices: tuple[int, ...] = ()  # local device ids the deployment uses here
    peers: tuple[Peer, ...] = ()  # one device per (local device, remote node) this node exchanges traffic with
    ports: tuple[tuple[int, str], ...] = ()  # (port, who binds it)
    release: str | None = None  # the vllm-ascend release the deployment was planned for (vllm_ascend_version)

    @property
    def on_cpu(self) -> bool:
        return self.cluster is not None and all(chip.id == "cpu" for chip in self.cluster.chips)


def find_node(cluster: Cluster, name: str | None, hostname: str, addresses: set[str]) -> Node | None:
    """The node named by --node, else the one whose name is this host's name or whose host_ip is ours."""
    if name is not None:
        return cluster.require_node(name, field="--node")
    for node in cluster.nodes:
        if node.name == hostname or node.host_ip in addresses:
            return node
    return None


def local_addresses() -> tuple[str, set[str]]:
    hostname = socket.gethostname()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(hostname, None, socket.AF_INET)}
    except OSError:
        addresses = set()
    return hostname, addresses


def _peers(loaded: LoadedDeployment, cluster: Cluster, node: Node) -> tuple[Peer, ...]:
    """KV flows between prefill and decode instances, and DP/EP traffic inside an instance, so a device here
    talks to the other role's devices and to its own instance's devices on other nodes."""
    deployment = loaded.deployment
    local: dict[int, set[str]] = {}  # local device -> instances it serves
    for instance in deployment.instances:
        for placement in instance.devices:
            if placement.node == node.name:
                for device in placement.devices:
                    local.setdefault(device, set()).add(instance.name)
    peers: dict[tuple[int, str], Peer] = {}
    for device, names in sorted(local.items()):
        roles = {i.role for i in deployment.instances if i.name in names}
        for other in deployment.instances:
            talks = other.name in names or ({other.role, *roles} == {"prefill", "decode"})
            if not talks:
                continue
            for placement in other.devices:
                if placement.node == node.name or (device, placement.node) in peers:
                    continue
                remote = device if device in placement.devices else placement.devices[0]
                ip = cluster.device(placement.node, remote).device_ip
                if ip is not None:
                    peers[(device, placement.node)] = Peer(device, placement.node, remote, ip)
    return tuple(peers.values())


def target_for(loaded: LoadedDeployment, node_name: str | None) -> Target:
    cluster = loaded.cluster()
    hostname, addresses = local_addresses()
    node = find_node(cluster, node_name, hostname, addresses)
    release = loaded.deployment.vllm_ascend_version or VLLM_ASCEND_RELEASE
    if node is None:
        return Target(cluster=cluster, release=release)
    devices = sorted({d for i in loaded.deployment.instances for p in i.devices if p.node == node.name
                      for d in p.devices})
    ports = tuple(sorted({(c.port, c.owner) for c in port_claims(Context.build(loaded)) if c.host == node.host_ip}))
    return Target(cluster=cluster, node=node, devices=tuple(devices), peers=_peers(loaded, cluster, node),
                  ports=ports, release=release)


def run_preflight(site: Site, target: Target) -> list[CheckResult]:
    """Every check, in the order an operator fixes things: devices, links, software, then ports and env."""
    runner = checks.Runner(site)
    results = []
    if target.on_cpu:
        results.append(checks.ascend_skipped(target))
    else:
        npus = checks.npu_smi(runner, target)
        results.append(npus.result)
        devices = target.devices or npus.devices
        results += [checks.links(runner, devices), checks.device_ips(runner, target, devices),
                    checks.tls(runner, devices), checks.ping_peers(runner, target),
                    checks.hccn_conf(site, target, devices), checks.cann_version(site), checks.driver_version(site),
                    checks.vllm_ascend(site, target)]
    results += [checks.mooncake(site), checks.ports_free(target), checks.environment(site, target)]
    return results
