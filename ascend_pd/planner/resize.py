"""A running deployment moved to new instance counts with the fewest restarts: instances that stay keep their devices,
ports and names; a role that needs more takes instances of the same shape another role gives up (a flip: stop, then
start again in the new role on the same devices); what is still missing starts on free devices, aligned as the planner
places them; what is left over stops."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from ascend_pd.deploy.schema import Deployment, DevicePlacement, Instance, Parallel, VllmArgs
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster, Device
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.ports import HostPorts

RoleShape = tuple[str, Shape]


@dataclass(frozen=True)
class Step:
    """One change to the running deployment, in the order they run. start: a new instance on free devices; flip:
    `replaces` stops, then `instance` starts on its devices in a new role; stop: `instance` drains and stops."""

    action: Literal["start", "flip", "stop"]
    instance: str
    role: str
    replaces: str | None = None

    def describe(self) -> str:
        if self.action == "flip":
            return f"flip {self.replaces} to {self.role} as {self.instance} (same devices)"
        return f"{self.action} {self.role} instance {self.instance}"


def shape_of(instance: Instance) -> Shape:
    p = instance.parallel
    return Shape(tp=p.tp, dp=p.dp, ep=p.ep, pp=p.pp)


def counts_of(deployment: Deployment) -> Counter[RoleShape]:
    return Counter((i.role, shape_of(i)) for i in deployment.instances)


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


class _Namer:
    """role-N names that no instance of the deployment has used: a new instance never takes a stopped one's name, so
    its pid file, log and engine id start fresh."""

    def __init__(self, deployment: Deployment):
        self._next = Counter()
        for instance in deployment.instances:
            self._next[instance.role] = max(self._next[instance.role], _index(instance.name) + 1)

    def __call__(self, role: str) -> str:
        name = f"{role}-{self._next[role]}"
        self._next[role] += 1
        return name


def _device_keys(instance: Instance) -> set[tuple[str, int]]:
    return {(p.node, d) for p in instance.devices for d in p.devices}


def _free_block(cluster: Cluster, used: set[tuple[str, int]], size: int) -> list[Device] | None:
    """`size` free devices at an offset aligned to `size`, inside one node when it fits one (as the planner places
    instances), else whole free nodes in a row."""
    devices = cluster.devices
    if size <= cluster.devices_per_node:
        for node in cluster.nodes:
            local = cluster.node_devices(node.name)
            for start in range(0, len(local) - size + 1, size):
                block = list(local[start:start + size])
                if not any((d.node, d.local_id) in used for d in block):
                    return block
        return None
    for start in range(0, len(devices) - size + 1, cluster.devices_per_node):
        block = list(devices[start:start + size])
        if not any((d.node, d.local_id) in used for d in block):
            return block
    return None


def _ports(cluster: Cluster, deployment: Deployment) -> HostPorts:
    """Port allocation that continues after every port the deployment's instances hold on each host."""
    ports = HostPorts(cluster.ephemeral_port_range())
    for instance in deployment.instances:
        for host in {cluster.node(p.node).host_ip for p in instance.devices}:
            ports.next_http[host] = max(ports.next_http.get(host, 0), instance.http_port + len(instance.endpoints()))
            ports.next_kv[host] = max(ports.next_kv.get(host, 0), instance.kv_port + instance.kv_port_count)
    return ports


def resize(deployment: Deployment, cluster: Cluster, target: Counter[RoleShape],
           vllm: dict[RoleShape, VllmArgs], flips: bool = True) -> tuple[Deployment, list[Step]]:
    """`deployment` with `target` instances per (role, shape), and the steps from one to the other: starts first
    (capacity arrives before any leaves), then flips, then stops. `vllm` gives the engine arguments of each (role,
    shape) that gains instances. Without `flips`, every new instance starts on free devices. InputError when the
    cluster has no free devices for a start."""
    current = counts_of(deployment)
    namer = _Namer(deployment)
    surplus: dict[RoleShape, int] = {key: n - target.get(key, 0) for key, n in current.items()
                                     if n > target.get(key, 0)}
    deficit: dict[RoleShape, int] = {key: n - current.get(key, 0) for key, n in target.items()
                                     if n > current.get(key, 0)}
    # the newest instances of a role go first: the oldest keep their names, and the proxy's longest-lived backends
    leaving = {key: sorted((i for i in deployment.instances if (i.role, shape_of(i)) == key),
                           key=lambda i: -_index(i.name))[:n] for key, n in surplus.items()}
    kept = [i for i in deployment.instances if not any(i is gone for out in leaving.values() for gone in out)]
    flipped: list[tuple[Instance, Instance]] = []
    for (role, shape), missing in (deficit.items() if flips else ()):
        for key in [k for k in leaving if k[1] == shape]:
            while missing and leaving[key]:
                old = leaving[key].pop(0)
                name = namer(role)
                flipped.append((old, old.model_copy(update={"name": name, "engine_id": name, "role": role,
                                                         "vllm": vllm[(role, shape)]})))
                missing -= 1
        deficit[(role, shape)] = missing
    stopping = [i for out in leaving.values() for i in out]
    used = {key for i in deployment.instances for key in _device_keys(i)}
    ports = _ports(cluster, deployment)
    started: list[Instance] = []
    for (role, shape), missing in deficit.items():
        for _ in range(missing):
            block = _free_block(cluster, used, shape.devices)
            if block is None:
                raise InputError(f"cluster '{cluster.name}' has no {shape.devices} free devices for one more {role} "
                                 f"instance ({shape.label()}) beside the running ones", field="instances",
                                 fix="free devices first, or give the re-plan a cluster with room to grow")
            used |= {(d.node, d.local_id) for d in block}
            name = namer(role)
            http_port, kv_port = ports.claim(name, {cluster.node(d.node).host_ip for d in block}, shape.dp,
                                             shape.devices)
            started.append(Instance(
                name=name, role=role, parallel=Parallel(tp=shape.tp, dp=shape.dp, ep=shape.ep, pp=shape.pp),
                devices=[DevicePlacement(node=block[i].node, devices=[d.local_id for d in block[i:i + shape.tp]])
                         for i in range(0, len(block), shape.tp)],
                http_port=http_port, kv_port=kv_port, engine_id=name, vllm=vllm[(role, shape)]))
    instances = kept + [new for _, new in flipped] + started
    steps = ([Step("start", i.name, i.role) for i in started]
             + [Step("flip", new.name, new.role, replaces=old.name) for old, new in flipped]
             + [Step("stop", i.name, i.role) for i in stopping])
    return deployment.model_copy(update={"instances": instances}), steps
