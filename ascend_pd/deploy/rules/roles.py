"""Rules about roles and identities: P has a D and the reverse, names and engine ids are unique, P and D share a pod."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule


@rule("APD301", "prefill instances without a decode instance, or the reverse")
def roles_paired(ctx: Context) -> Iterator[Diagnostic]:
    prefill, decode = ctx.deployment.by_role("prefill"), ctx.deployment.by_role("decode")
    if prefill and not decode:
        yield ctx.diag("APD301", "error", ("instances",),
                       f"{len(prefill)} prefill instance(s) but no decode instance: prefilled KV has nowhere to go",
                       "add a decode instance, or make the instances colocated")
    if decode and not prefill:
        yield ctx.diag("APD301", "error", ("instances",),
                       f"{len(decode)} decode instance(s) but no prefill instance: decode would wait for KV forever",
                       "add a prefill instance, or make the instances colocated")


@rule("APD302", "two instances share a name")
def unique_names(ctx: Context) -> Iterator[Diagnostic]:
    seen: dict[str, int] = {}
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.name in seen:
            yield ctx.diag("APD302", "error", ("instances", i, "name"),
                           f"instance name '{inst.name}' is used by instances[{seen[inst.name]}] too",
                           "give each instance its own name")
        seen.setdefault(inst.name, i)


@rule("APD303", "two engines share an engine_id (vLLM adds _dp<rank> to each DP rank's id)")
def unique_engine_ids(ctx: Context) -> Iterator[Diagnostic]:
    seen: dict[str, str] = {}
    reported: set[int] = set()  # instances already named once
    # the ranks each placed instance places (APD101 reports unknown nodes, APD105 a dp its devices do not hold)
    for rank in ctx.placed_ranks():
        name, engine_id = rank.instance.name, rank.reported_engine_id
        if rank.index in reported:
            continue
        if engine_id in seen and seen[engine_id] != name:
            reported.add(rank.index)
            yield ctx.diag("APD303", "error", ("instances", rank.index, "engine_id"),
                           f"engine id '{engine_id}' of instance '{name}' is also used by instance "
                           f"'{seen[engine_id]}'; the connector asserts 'Conflict engine id'",
                           "give each instance its own engine_id")
            continue
        seen[engine_id] = name


@rule("APD304", "a prefill instance has no decode instance in its own SuperPoD")
def same_superpod(ctx: Context) -> Iterator[Diagnostic]:
    if not ctx.cluster.superpods:
        return
    pod_of = {n.name: n.superpod for n in ctx.cluster.nodes}
    decode_pods = {pod_of.get(inst.devices[0].node) for inst in ctx.deployment.by_role("decode")}
    if not decode_pods:
        return
    roce = ctx.cluster.links[ctx.cluster.topology["cluster"]]
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.role != "prefill":
            continue
        pod = pod_of.get(inst.devices[0].node)
        if pod is None or pod in decode_pods:
            continue
        detail = ""
        if ctx.model is not None and ctx.deployment.workload is not None:
            tokens = ctx.deployment.workload.input_tokens.mean
            per_device = ctx.model.kv_bytes_per_token_per_device(inst.parallel.tp, ctx.deployment.model.kv_cache_dtype)
            seconds = tokens * per_device / roce.bandwidth + roce.latency
            detail = (f"; moving the KV of a mean {tokens:.0f}-token prompt takes about {seconds * 1e3:.1f} ms "
                      f"at {roce.bandwidth / 1e9:.0f} GB/s per device")
        yield ctx.diag("APD304", "warning", ("instances", i, "devices"),
                       f"prefill instance '{inst.name}' is in SuperPoD {pod}, but every decode instance is in "
                       f"SuperPoD {', '.join(str(p) for p in sorted(x for x in decode_pods if x is not None))}: "
                       f"its KV crosses '{roce.name}'{detail}",
                       "place a decode instance in the same SuperPoD, or accept the transfer time")
