"""A deployment made of identical SuperPoD groups, cut down to one group for the simulator.

A plan for N SuperPoDs repeats one serving group per SuperPoD. Simulating all of them at the full rate costs N times
the events for the same figures, so when the requests to simulate pass a budget, the simulator runs one group at
1/N of the rate and scales the totals back. The cut routes each request inside its SuperPoD, as the planner sizes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.deploy.schema import Deployment, Instance
from ascend_pd.hardware import Cluster

# Above this many arrivals a simulation of identical groups runs one group (2M requests take minutes and GBs).
MAX_SIMULATED_REQUESTS = 300_000


@dataclass(frozen=True)
class Replicas:
    group: Deployment  # the instances of one SuperPoD
    count: int  # identical groups in the whole deployment


def _signature(instance: Instance) -> str:
    """What the simulator reads of an instance, apart from where it is."""
    return instance.model_dump_json(include={"role", "parallel", "vllm"})


def identical_groups(deployment: Deployment, cluster: Cluster) -> Replicas | None:
    """One SuperPoD's instances and the number of SuperPoDs, when every SuperPoD the deployment uses holds the same
    instances and no instance crosses a SuperPoD; None otherwise (then only the whole deployment is faithful)."""
    pods: dict[int | None, list[Instance]] = {}
    for instance in deployment.instances:
        own = {cluster.node(p.node).superpod for p in instance.devices}
        if len(own) != 1 or None in own:
            return None
        pods.setdefault(own.pop(), []).append(instance)
    if len(pods) < 2:
        return None
    contents = {tuple(sorted(_signature(i) for i in members)) for members in pods.values()}
    if len(contents) != 1:
        return None
    first = pods[min(pods)]
    return Replicas(deployment.model_copy(update={"instances": first}), len(pods))
