"""Rules about where instances and proxy replicas run: nodes and devices exist, no device (or proxy node) is used
twice, shapes match, TP links allow TP."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.yamlfile import Loc, dotted


@rule("APD101", "an instance names a node the cluster does not have")
def unknown_node(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        for j, placement in enumerate(inst.devices):
            if not ctx.cluster.has_node(placement.node):
                yield ctx.diag("APD101", "error", ("instances", i, "devices", j, "node"),
                               f"instance '{inst.name}' uses node '{placement.node}', which cluster "
                               f"'{ctx.cluster.name}' does not have", ctx.cluster.node_fix())


def proxy_replica_locs(ctx: Context) -> list[tuple[str, Loc]]:
    """Each node that runs a proxy replica, with where the deployment names it: proxy.node, then extra_nodes."""
    proxy = ctx.deployment.proxy
    return [(proxy.node, ("proxy", "node"))] + [(node, ("proxy", "extra_nodes", k))
                                                for k, node in enumerate(proxy.extra_nodes)]


@rule("APD102", "a proxy replica runs on a node the cluster does not have")
def unknown_proxy_node(ctx: Context) -> Iterator[Diagnostic]:
    for node, loc in proxy_replica_locs(ctx):
        if not ctx.cluster.has_node(node):
            yield ctx.diag("APD102", "error", loc, f"proxy node '{node}' is not in cluster '{ctx.cluster.name}'",
                           ctx.cluster.node_fix())


@rule("APD103", "a device id does not exist on its node")
def unknown_device(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        for j, placement in enumerate(inst.devices):
            if not ctx.cluster.has_node(placement.node):
                continue
            count = len(ctx.cluster.node_devices(placement.node))
            bad = [d for d in placement.devices if d >= count]
            if bad:
                yield ctx.diag("APD103", "error", ("instances", i, "devices", j, "devices"),
                               f"instance '{inst.name}': node '{placement.node}' has devices 0..{count - 1}, "
                               f"not {', '.join(map(str, bad))}",
                               f"use device ids below {count}")


@rule("APD104", "a device is used by two instances (or twice by one)")
def device_used_twice(ctx: Context) -> Iterator[Diagnostic]:
    owner: dict[tuple[str, int], tuple[str, int, int]] = {}
    for i, inst in enumerate(ctx.deployment.instances):
        for j, placement in enumerate(inst.devices):
            for device in placement.devices:
                key = (placement.node, device)
                if key in owner:
                    first_name, fi, fj = owner[key]
                    who = f"instances '{first_name}' and '{inst.name}'" if first_name != inst.name \
                        else f"instance '{inst.name}' twice"
                    yield ctx.diag("APD104", "error", ("instances", i, "devices", j, "devices"),
                                   f"device {device} of node '{placement.node}' is used by {who} "
                                   f"(first at instances[{fi}].devices[{fj}])",
                                   "give every instance its own devices")
                else:
                    owner[key] = (inst.name, i, j)


@rule("APD105", "an instance's device count is not tp x pp x dp")
def device_count(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        p = inst.parallel
        want = p.tp * p.pp * p.dp
        if inst.device_count != want:
            yield ctx.diag("APD105", "error", ("instances", i, "devices"),
                           f"instance '{inst.name}' lists {inst.device_count} devices but tp x pp x dp = "
                           f"{p.tp} x {p.pp} x {p.dp} = {want}",
                           "list tp x pp devices for each of the dp ranks, or change parallel")


@rule("APD106", "the DP ranks of an instance do not each hold tp x pp devices")
def dp_rank_shape(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        p = inst.parallel
        if inst.device_count != p.tp * p.pp * p.dp:
            continue  # APD105 already says so
        groups = inst.rank_groups()
        sizes = [sum(len(pl.devices) for pl in group) for group in groups]
        if len(groups) != p.dp or any(size != p.tp * p.pp for size in sizes):
            yield ctx.diag("APD106", "error", ("instances", i, "devices"),
                           f"instance '{inst.name}' has {len(groups)} DP rank entries of {sizes} devices; "
                           f"dp={p.dp} ranks of tp x pp = {p.tp * p.pp} devices each are needed",
                           "write one devices entry per DP rank (entries of a rank that spans nodes share dp_rank)")


@rule("APD107", "a TP group crosses a link that cannot carry tensor parallelism")
def tp_group_link(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        for rank, group in enumerate(inst.rank_groups()):
            try:
                devices = [ctx.cluster.device(pl.node, d) for pl in group for d in pl.devices]
            except KeyError:
                continue  # APD101/APD103 report missing nodes and devices
            problem = ctx.cluster.tp_group_problem(devices)
            if problem:
                nodes = sorted({pl.node for pl in group})
                yield ctx.diag("APD107", "error", ("instances", i, "devices"),
                               f"instance '{inst.name}' DP rank {rank} spans {', '.join(nodes)}: {problem}",
                               "keep each TP group on one node (A2) or inside one SuperPoD (A3); "
                               "use more DP ranks instead of a wider TP")


@rule("APD108", "a node runs two proxy replicas (listed twice in proxy.node and proxy.extra_nodes)")
def proxy_node_twice(ctx: Context) -> Iterator[Diagnostic]:
    first: dict[str, Loc] = {}
    for node, loc in proxy_replica_locs(ctx):
        if node in first:
            # Replicas share one port, so a second one on a node could not bind it.
            yield ctx.diag("APD108", "error", loc,
                           f"node '{node}' already runs a proxy replica (at {dotted(first[node])}); replicas "
                           "listen on the same port, so a node holds one",
                           "list each node once; for more processes on one node, raise proxy.workers")
        else:
            first[node] = loc


@rule("APD109", "an instance spans nodes of two chips")
def one_chip_per_instance(ctx: Context) -> Iterator[Diagnostic]:
    if len(ctx.cluster.chips) == 1:
        return
    for i, inst in enumerate(ctx.deployment.instances):
        by_chip: dict[str, set[str]] = {}
        for node in (p.node for p in inst.devices if ctx.cluster.has_node(p.node)):
            by_chip.setdefault(ctx.cluster.node(node).chip.id, set()).add(node)
        if len(by_chip) > 1:
            where = " and ".join(f"{chip} ({', '.join(sorted(nodes))})" for chip, nodes in by_chip.items())
            # One engine runs one build of kernels and graphs, and the cost model prices it on one chip.
            yield ctx.diag("APD109", "error", ("instances", i, "devices"),
                           f"instance '{inst.name}' spans nodes of {where}; an engine's ranks must run on one chip",
                           "place every device of the instance on nodes of one chip")
