"""Rules about ports: no two endpoints of one host share a port, kv ports stay clear of the Ascend transport's range."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.deploy.rules.placement import proxy_replica_locs
from ascend_pd.yamlfile import Loc


PROXY_PORT_HINT = ("change proxy.port, or move the instance's port, so the proxy's port is free on proxy.node and "
                   "on every node of proxy.extra_nodes")


@dataclass(frozen=True)
class PortClaim:
    host: str
    port: int
    kind: str  # http | kv | proxy
    owner: str  # e.g. "instance 'prefill-0' DP rank 1"
    loc: Loc


def port_claims(ctx: Context) -> list[PortClaim]:
    """Every port a process binds, where the rank layout puts it: each DP rank's HTTP port on its leader's host,
    each worker's side-channel port on the host of its device, and the proxy's port on each of its nodes."""
    return ctx.derived("port_claims", _collect_port_claims)


def _collect_port_claims(ctx: Context) -> list[PortClaim]:
    claims: list[PortClaim] = []
    for rank in ctx.placed_ranks():
        owner, i = f"instance '{rank.instance.name}' DP rank {rank.dp_rank}", rank.index
        claims.append(PortClaim(rank.host, rank.http_port, "http", owner, ("instances", i, "http_port")))
        claims += [PortClaim(host, port, "kv", f"{owner} worker {worker}", ("instances", i, "kv_port"))
                   for worker, host, port in rank.worker_ports()]
    return claims + _proxy_claims(ctx, {n.name: n.host_ip for n in ctx.cluster.nodes})


def _proxy_claims(ctx: Context, host: dict[str, str]) -> list[PortClaim]:
    """proxy.port on each node that runs a replica; a node listed twice claims it once (APD108 reports that)."""
    proxy = ctx.deployment.proxy
    claims: dict[str, PortClaim] = {}
    for node, loc in proxy_replica_locs(ctx):
        if node in host and node not in claims:
            first = node == proxy.node
            claims[node] = PortClaim(host[node], proxy.port, "proxy",
                                     "the proxy" if first else f"the proxy replica on node '{node}'",
                                     ("proxy", "port") if first else loc)
    return list(claims.values())


def _hint(first: PortClaim, second: PortClaim, hint: str) -> str:
    if "proxy" in (first.kind, second.kind):
        return PROXY_PORT_HINT
    return hint


def _clashes(ctx: Context, kinds: set[frozenset[str]]) -> Iterator[tuple[PortClaim, PortClaim]]:
    first: dict[tuple[str, int], PortClaim] = {}
    for claim in port_claims(ctx):
        key = (claim.host, claim.port)
        if key in first:
            other = first[key]
            if frozenset({other.kind if other.kind != "proxy" else "http",
                          claim.kind if claim.kind != "proxy" else "http"}) in kinds:
                yield other, claim
        else:
            first[key] = claim


@rule("APD501", "two HTTP endpoints (or an endpoint and the proxy) on one host share a port")
def http_clash(ctx: Context) -> Iterator[Diagnostic]:
    for first, second in _clashes(ctx, {frozenset({"http"})}):
        yield ctx.diag("APD501", "error", second.loc,
                       f"{second.owner} and {first.owner} both serve HTTP on {second.host}:{second.port}",
                       _hint(first, second,
                             "give each instance on a host its own http_port range (DP rank i uses http_port + i)"))


@rule("APD502", "two workers on one host share a KV side-channel port")
def kv_clash(ctx: Context) -> Iterator[Diagnostic]:
    for first, second in _clashes(ctx, {frozenset({"kv"})}):
        yield ctx.diag("APD502", "error", second.loc,
                       f"{second.owner} and {first.owner} both bind kv port {second.port} on {second.host}",
                       "space kv_port values so each instance's range kv_port .. kv_port + dp*tp*pp - 1 is its own")


@rule("APD503", "an HTTP port falls inside a KV side-channel port range on the same host")
def http_kv_clash(ctx: Context) -> Iterator[Diagnostic]:
    for first, second in _clashes(ctx, {frozenset({"http", "kv"})}):
        yield ctx.diag("APD503", "error", second.loc,
                       f"{second.owner} and {first.owner} both use port {second.port} on {second.host}",
                       _hint(first, second, "keep HTTP ports (e.g. 8000-8999) apart from kv ports (e.g. 36000 and up)"))


@rule("APD504", "a kv port range overlaps the Ascend transport's ephemeral ports")
def ephemeral_range(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.protocol != "ascend":
        return
    low, high = ctx.cluster.ephemeral_port_range()
    for i, inst in enumerate(ctx.deployment.instances):
        first, last = inst.kv_port, inst.kv_port + inst.kv_port_count - 1
        if first < high and last >= low:
            yield ctx.diag("APD504", "error", ("instances", i, "kv_port"),
                           f"instance '{inst.name}' kv ports {first}..{last} overlap [{low}, {high}), where the Ascend "
                           f"direct transport picks random ports on {ctx.cluster.devices_per_node}-device nodes",
                           f"use kv_port >= {high}")


@rule("APD505", "a port range runs past 65535")
def port_range_end(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst in enumerate(ctx.deployment.instances):
        for field, start, count in (("http_port", inst.http_port, len(inst.rank_groups())),
                                    ("kv_port", inst.kv_port, inst.kv_port_count)):
            if start + count - 1 > 65535:
                yield ctx.diag("APD505", "error", ("instances", i, field),
                               f"instance '{inst.name}' needs {field} {start}..{start + count - 1}, past 65535",
                               f"use a {field} of at most {65536 - count}")


@rule("APD506", "a privileged port (below 1024)")
def privileged_port(ctx: Context) -> Iterator[Diagnostic]:
    for claim in port_claims(ctx):
        if claim.port < 1024:
            yield ctx.diag("APD506", "warning", claim.loc,
                           f"{claim.owner} uses port {claim.port}, which needs root to bind",
                           "use a port of 1024 or above")
            break
