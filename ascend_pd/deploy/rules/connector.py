"""Rules about the KV connector: protocol on this cluster, TP combinations each implementation supports, block sizes,
and whether its transport reaches the memory the caches live in."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.deploy.schema import Instance


def _disaggregated(ctx: Context) -> bool:
    return bool(ctx.deployment.by_role("prefill") and ctx.deployment.by_role("decode"))


@rule("APD401", "the connector protocol is not available on the cluster")
def protocol_available(ctx: Context) -> Iterator[Diagnostic]:
    protocol = ctx.deployment.connector.protocol
    if _disaggregated(ctx) and protocol not in ctx.cluster.protocols:
        yield ctx.diag("APD401", "error", ("connector", "protocol"),
                       f"protocol '{protocol}' is not available on cluster '{ctx.cluster.name}'",
                       f"use one of: {', '.join(ctx.cluster.protocols)}")


@rule("APD402", "vllm-ascend's connectors need Ascend NPUs")
def vllm_ascend_needs_npu(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.implementation == "vllm-ascend" and "ascend" not in ctx.cluster.protocols:
        yield ctx.diag("APD402", "error", ("connector", "implementation"),
                       f"implementation 'vllm-ascend' runs only on Ascend NPUs; cluster '{ctx.cluster.name}' has none",
                       "use implementation: ascend-pd")


def _decode_per_tp(ctx: Context) -> list[Instance]:
    """The first decode instance of each TP size: a TP rule judges a prefill against these alone, not against every
    decode instance of a SuperCluster."""
    first: dict[int, Instance] = {}
    for d in ctx.deployment.by_role("decode"):
        first.setdefault(d.parallel.tp, d)
    return list(first.values())


@rule("APD403", "vllm-ascend pull mode cannot serve P TP < D TP, nor P TP not a multiple of D TP")
def vllm_ascend_tp(ctx: Context) -> Iterator[Diagnostic]:
    conn = ctx.deployment.connector
    if conn.implementation != "vllm-ascend" or conn.mode != "pull":
        return
    decode = _decode_per_tp(ctx)
    for i, p in enumerate(ctx.deployment.instances):
        if p.role != "prefill":
            continue
        for d in decode:
            if p.parallel.tp < d.parallel.tp or p.parallel.tp % d.parallel.tp:
                yield ctx.diag("APD403", "error", ("instances", i, "parallel", "tp"),
                               f"prefill '{p.name}' tp={p.parallel.tp} and decode '{d.name}' tp={d.parallel.tp}: "
                               "vllm-ascend's MooncakeConnectorV1 needs P TP >= D TP with P TP a multiple of D TP",
                               "use implementation: ascend-pd (any TP ratio), or raise the prefill TP")
                break


@rule("APD404", "P and D TP sizes are not multiples of one another")
def tp_ratio(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.implementation != "ascend-pd":
        return
    decode = _decode_per_tp(ctx)
    for i, p in enumerate(ctx.deployment.instances):
        if p.role != "prefill":
            continue
        for d in decode:
            small, large = sorted((p.parallel.tp, d.parallel.tp))
            if large % small:
                yield ctx.diag("APD404", "error", ("instances", i, "parallel", "tp"),
                               f"prefill '{p.name}' tp={p.parallel.tp} and decode '{d.name}' tp={d.parallel.tp}: "
                               "heterogeneous TP needs one to be a multiple of the other",
                               "pick TP sizes such as 1, 2, 4, 8, 16")
                break


@rule("APD405", "vllm-ascend needs one TP/DP shape per role")
def one_shape_per_role(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.implementation != "vllm-ascend":
        return
    for role in ("prefill", "decode"):
        shapes: dict[tuple[int, int], str] = {}
        for i, inst in enumerate(ctx.deployment.instances):
            if inst.role != role:
                continue
            shape = (inst.parallel.tp, inst.parallel.dp)
            if shapes and shape not in shapes:
                other_shape, other = next(iter(shapes.items()))
                yield ctx.diag("APD405", "error", ("instances", i, "parallel"),
                               f"{role} instance '{inst.name}' has tp={shape[0]}, dp={shape[1]} but '{other}' has "
                               f"tp={other_shape[0]}, dp={other_shape[1]}; vllm-ascend's kv_transfer_config carries one "
                               f"{role}.tp_size and {role}.dp_size",
                               f"give every {role} instance the same tp and dp, or use implementation: ascend-pd")
            shapes.setdefault(shape, inst.name)


@rule("APD406", "vllm-ascend decode instances must not use pipeline parallelism")
def decode_pp(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.implementation != "vllm-ascend":
        return
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.role == "decode" and inst.parallel.pp > 1:
            yield ctx.diag("APD406", "error", ("instances", i, "parallel", "pp"),
                           f"decode instance '{inst.name}' has pp={inst.parallel.pp}; vllm-ascend supports PP on the "
                           "prefill side only", "set pp: 1 on decode instances")


@rule("APD407", "prefill and decode use different KV block sizes")
def block_sizes_match(ctx: Context) -> Iterator[Diagnostic]:
    prefill = ctx.deployment.by_role("prefill")
    if not prefill:
        return
    want = prefill[0].vllm.block_size
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.role in ("prefill", "decode") and inst.vllm.block_size != want:
            yield ctx.diag("APD407", "error", ("instances", i, "vllm", "block_size"),
                           f"instance '{inst.name}' has block_size={inst.vllm.block_size}, but '{prefill[0].name}' has "
                           f"{want}; KV blocks move whole, so P and D must agree",
                           f"set block_size: {want} on every prefill and decode instance")


@rule("APD408", "a block size other than 128 on Ascend")
def ascend_block_size(ctx: Context) -> Iterator[Diagnostic]:
    if "ascend" not in ctx.cluster.protocols:
        return
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.vllm.block_size != 128:
            yield ctx.diag("APD408", "warning", ("instances", i, "vllm", "block_size"),
                           f"instance '{inst.name}' has block_size={inst.vllm.block_size}; vllm-ascend's attention "
                           "kernels support 128 and force it with prefix caching or chunked prefill",
                           "set block_size: 128")


@rule("APD409", "a block size the vLLM CPU attention backend rejects")
def cpu_block_size(ctx: Context) -> Iterator[Diagnostic]:
    chip_by_node = {n.name: n.chip.id for n in ctx.cluster.nodes}
    for i, inst in enumerate(ctx.deployment.instances):
        if chip_by_node.get(inst.devices[0].node) == "cpu" and inst.vllm.block_size % 32:
            yield ctx.diag("APD409", "error", ("instances", i, "vllm", "block_size"),
                           f"instance '{inst.name}' has block_size={inst.vllm.block_size}; vLLM's CPU attention "
                           "backend needs a multiple of 32 and the engine fails at start otherwise",
                           "set block_size: 32 (or 64, 128)")


@rule("APD412", "the ascend-pd connector over tcp on Ascend NPUs, whose caches the TCP transport cannot read")
def tcp_on_npus(ctx: Context) -> Iterator[Diagnostic]:
    conn = ctx.deployment.connector
    on_npus = "ascend" in ctx.cluster.protocols
    if conn.implementation != "ascend-pd" or conn.protocol != "tcp" or not on_npus or not _disaggregated(ctx):
        return
    # Mooncake's TCP transport copies registered memory with plain host memcpy (it has a device path for CUDA-like
    # GPUs only), and the connector registers the KV caches themselves, which live in NPU memory.
    yield ctx.diag("APD412", "error", ("connector", "protocol"),
                   f"protocol 'tcp' on cluster '{ctx.cluster.name}': the KV caches live in NPU memory, which "
                   "Mooncake's TCP transport cannot read (it copies through host memory); the transfer would fail "
                   "or move garbage",
                   "use protocol: ascend (Mooncake built with USE_ASCEND_DIRECT)")
