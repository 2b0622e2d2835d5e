"""Rules about the model on its instances: heads divide by TP, KV heads and replication, expert parallelism, memory."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.models.quant import role_kv_dtype
from ascend_pd.perf.memory import memory_fit

GIB = 1024**3


@rule("APD200", "the model is neither in the catalog nor a readable local config.json")
def unknown_model(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        yield ctx.diag("APD200", "warning", ("model", "name"),
                       f"model '{ctx.deployment.model.name}' is not a catalog id and no config.json is readable there; "
                       "rules on heads, experts and memory were skipped",
                       "use a catalog id (`ascend-pd models`) or a local directory holding the model's config.json")


@rule("APD201", "TP does not divide the attention heads")
def tp_divides_heads(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        return
    heads = ctx.model.num_attention_heads
    for i, inst in enumerate(ctx.deployment.instances):
        if heads % inst.parallel.tp:
            yield ctx.diag("APD201", "error", ("instances", i, "parallel", "tp"),
                           f"instance '{inst.name}': tp={inst.parallel.tp} does not divide the "
                           f"{heads} attention heads of {ctx.model.id}",
                           f"use a tp that divides {heads}")


@rule("APD202", "TP exceeds the KV heads, so each KV head is replicated on several ranks")
def kv_head_replication(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None or ctx.model.mla:
        return
    kv = ctx.model.num_kv_heads
    for i, inst in enumerate(ctx.deployment.instances):
        tp = inst.parallel.tp
        if tp > kv and tp % kv == 0:
            yield ctx.diag("APD202", "info", ("instances", i, "parallel", "tp"),
                           f"instance '{inst.name}': tp={tp} exceeds the {kv} KV heads; each KV head is held by "
                           f"{tp // kv} ranks, so KV memory per device does not shrink beyond tp={kv}",
                           "expected for wide TP; the connector reads one replica per head")


@rule("APD203", "TP above the KV heads is not a multiple of them")
def kv_heads_divide(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None or ctx.model.mla:
        return
    kv = ctx.model.num_kv_heads
    for i, inst in enumerate(ctx.deployment.instances):
        tp = inst.parallel.tp
        if (tp > kv and tp % kv) or (tp <= kv and kv % tp):
            yield ctx.diag("APD203", "error", ("instances", i, "parallel", "tp"),
                           f"instance '{inst.name}': tp={tp} and the {kv} KV heads of {ctx.model.id} do not divide "
                           "one another, so vLLM cannot shard or replicate the KV heads evenly",
                           f"use a tp that divides {kv} or is a multiple of it")


@rule("APD204", "expert parallelism does not fit the model or vLLM's EP group")
def expert_parallel(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        return
    for i, inst in enumerate(ctx.deployment.instances):
        p = inst.parallel
        if p.ep == 1:
            continue
        if not ctx.model.is_moe:
            yield ctx.diag("APD204", "error", ("instances", i, "parallel", "ep"),
                           f"instance '{inst.name}': ep={p.ep} but {ctx.model.id} is a dense model",
                           "set ep: 1")
        elif p.ep != p.tp * p.dp:
            yield ctx.diag("APD204", "error", ("instances", i, "parallel", "ep"),
                           f"instance '{inst.name}': ep={p.ep}, but vLLM's expert-parallel group spans every TP and "
                           f"DP rank, so ep must be tp x dp = {p.tp * p.dp}",
                           f"set ep: {p.tp * p.dp} (or ep: 1 to shard experts by TP)")


@rule("APD205", "the weights and one full-length sequence do not fit device memory")
def weights_fit(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        return
    chip_by_node = {n.name: n.chip for n in ctx.cluster.nodes}
    for i, inst in enumerate(ctx.deployment.instances):
        chip = chip_by_node.get(inst.devices[0].node)
        if chip is None:
            continue
        p, args = inst.parallel, inst.vllm
        fit = memory_fit(ctx.model, chip, ctx.deployment.model.quantization,
                         role_kv_dtype(ctx.deployment.model.kv_cache_dtype, inst.role),
                         p.tp, p.pp, p.ep, args.gpu_memory_utilization)
        if fit.kv_capacity_tokens < args.max_model_len:
            yield ctx.diag("APD205", "error", ("instances", i, "parallel"),
                           f"instance '{inst.name}': {fit.weights_bytes / GIB:.1f} GiB of weights per device leave room "
                           f"for {fit.kv_capacity_tokens} KV tokens, less than max_model_len={args.max_model_len} "
                           f"({chip.id}: {chip.hbm_bytes / GIB:.0f} GiB x gpu_memory_utilization "
                           f"{args.gpu_memory_utilization})",
                           "raise tp, pp or ep, quantize the weights, or lower max_model_len")


@rule("APD206", "max_num_seqs sequences of max_model_len tokens do not fit the KV cache")
def kv_capacity(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        return
    chip_by_node = {n.name: n.chip for n in ctx.cluster.nodes}
    for i, inst in enumerate(ctx.deployment.instances):
        chip = chip_by_node.get(inst.devices[0].node)
        if chip is None:
            continue
        p, args = inst.parallel, inst.vllm
        fit = memory_fit(ctx.model, chip, ctx.deployment.model.quantization,
                         role_kv_dtype(ctx.deployment.model.kv_cache_dtype, inst.role),
                         p.tp, p.pp, p.ep, args.gpu_memory_utilization)
        need = args.max_num_seqs * args.max_model_len
        if not args.max_model_len <= fit.kv_capacity_tokens < need:
            continue
        # A batch of typical requests that fits is normal sizing (vLLM preempts the rare long batch): say so quietly.
        workload = ctx.deployment.workload
        typical = workload.input_tokens.mean + workload.output_tokens.mean if workload else args.max_model_len
        severity = "info" if args.max_num_seqs * typical <= fit.kv_capacity_tokens else "warning"
        yield ctx.diag("APD206", severity, ("instances", i, "vllm", "max_num_seqs"),
                       f"instance '{inst.name}': max_num_seqs x max_model_len = {need} tokens, but the KV cache "
                       f"holds about {fit.kv_capacity_tokens} per device; full-length batches will be preempted",
                       f"lower max_num_seqs to {max(1, fit.kv_capacity_tokens // args.max_model_len)} or "
                       "max_model_len, or add devices")


@rule("APD207", "max_model_len exceeds the model's context window")
def context_window(ctx: Context) -> Iterator[Diagnostic]:
    if ctx.model is None:
        return
    limit = ctx.model.max_position_embeddings
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.vllm.max_model_len > limit:
            yield ctx.diag("APD207", "warning", ("instances", i, "vllm", "max_model_len"),
                           f"instance '{inst.name}': max_model_len={inst.vllm.max_model_len} exceeds "
                           f"{ctx.model.id}'s max_position_embeddings={limit}; vLLM refuses it without rope scaling",
                           f"use max_model_len <= {limit}")
