"""Rules that P and D build the same KV caches: the same draft layers and the same data types.

Block sizes have their own rule (APD407). Each rule compares every prefill and decode instance with the first
prefill instance, since any decode instance may receive from any prefill instance."""

from __future__ import annotations

from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.deploy.schema import Instance
from ascend_pd.deploy.vllm_flags import DraftConfig, draft_config, flag_value


def _pairs(ctx: Context) -> Iterator[tuple[int, Instance, Instance]]:
    """(index, instance, reference) for every P and D instance but the reference, the first prefill instance."""
    prefill = ctx.deployment.by_role("prefill")
    if not prefill:
        return
    for i, inst in enumerate(ctx.deployment.instances):
        if inst.role in ("prefill", "decode") and inst is not prefill[0]:
            yield i, inst, prefill[0]


def _describe(draft: DraftConfig | None) -> str:
    return "no --speculative-config" if draft is None else draft.describe()


def _lookahead_fits(inst: Instance, mine: DraftConfig, ref: DraftConfig) -> bool:
    """Draft tokens per step only size the lookahead, not the caches: vllm-ascend's PD guide runs P with 1 and D
    with 1 or more. Prefill instances must agree among themselves."""
    if mine.num_speculative_tokens == ref.num_speculative_tokens:
        return True
    return inst.role == "decode" and ref.num_speculative_tokens == 1 and (mine.num_speculative_tokens or 0) >= 1


@rule("APD410", "prefill and decode use different draft (MTP/speculative) configurations")
def draft_configs_match(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst, ref in _pairs(ctx):
        mine, theirs = draft_config(inst), draft_config(ref)
        same_layers = (mine is None) == (theirs is None) and (
            mine is None or (mine.method, mine.model) == (theirs.method, theirs.model))
        if same_layers and (mine is None or _lookahead_fits(inst, mine, theirs)):
            continue
        why = ("the draft layers own KV caches, so P and D must build the same ones" if not same_layers else
               "prefill instances must agree, and a decode instance may draft a different number of tokens only "
               "when prefill drafts 1, as vllm-ascend's PD guide runs them")
        yield ctx.diag("APD410", "error", ("instances", i, "vllm", "extra_args"),
                       f"instance '{inst.name}' has {_describe(mine)}, but '{ref.name}' has {_describe(theirs)}; {why}",
                       "pass the same --speculative-config method to every prefill and decode instance, with "
                       "num_speculative_tokens 1 on prefill")


def _types(ctx: Context, inst: Instance) -> dict[str, str]:
    """The data types that shape an instance's KV cache and weights; extra_args win, as they come last."""
    extra = inst.vllm.extra_args
    return {"dtype": flag_value(extra, "--dtype") or inst.vllm.dtype,
            "kv-cache dtype": flag_value(extra, "--kv-cache-dtype") or "auto",
            "quantization": flag_value(extra, "--quantization", "-q") or ctx.deployment.model.quantization}


@rule("APD411", "prefill and decode use different dtypes, kv-cache dtypes or quantization")
def types_match(ctx: Context) -> Iterator[Diagnostic]:
    for i, inst, ref in _pairs(ctx):
        mine, theirs = _types(ctx, inst), _types(ctx, ref)
        differ = [name for name in mine if mine[name] != theirs[name]]
        if not differ:
            continue
        detail = "; ".join(f"{name} {mine[name]} against {theirs[name]}" for name in differ)
        yield ctx.diag("APD411", "error", ("instances", i, "vllm"),
                       f"instance '{inst.name}' and '{ref.name}' differ in {detail}; KV blocks move as raw bytes, "
                       "so P and D must lay them out alike",
                       "give every prefill and decode instance the same vllm.dtype and the same --dtype, "
                       "--kv-cache-dtype and --quantization in extra_args")
