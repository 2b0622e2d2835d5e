"""Rules about P and D on different chip generations (A2 = 910B, A3 = 910C) of a cluster that mixes chips: what each
connector is known to do across them. The proxy pairs any prefill instance with any decode instance, so one
instance on another generation than the rest puts every pair through that crossing."""

from __future__ import annotations

from typing import Iterator, NamedTuple

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.deploy.schema import Instance
from ascend_pd.hardware import Chip
from ascend_pd.hardware.platform import chip_platform

NAMES = {"a2": "A2", "a3": "A3", "cpu": "CPU"}


class Crossing(NamedTuple):
    index: int  # of the instance on another generation than the first prefill instance
    text: str  # both instances and their generations, for a message


def _chip(ctx: Context, instance: Instance) -> Chip | None:
    """The chip of the instance's nodes (APD109 refuses an instance across chips), None if none is known."""
    chips = ctx.cluster.chips_of(p.node for p in instance.devices)
    return chips[0] if chips else None


def _describe(chip: Chip) -> str:
    return f"{NAMES[chip_platform(chip)]} ({chip.id})"


def _crossing(ctx: Context) -> Crossing | None:
    """The first prefill or decode instance on another generation than the first prefill instance."""
    prefill, decode = ctx.deployment.by_role("prefill"), ctx.deployment.by_role("decode")
    if len(ctx.cluster.chips) == 1 or not (prefill and decode):
        return None
    reference = prefill[0]
    mine = _chip(ctx, reference)
    for i, inst in enumerate(ctx.deployment.instances):
        theirs = _chip(ctx, inst) if inst.role in ("prefill", "decode") else None
        if mine and theirs and chip_platform(theirs) != chip_platform(mine):
            return Crossing(i, f"{inst.role} instance '{inst.name}' runs on {_describe(theirs)} "
                                  f"nodes and prefill instance '{reference.name}' on {_describe(mine)} nodes")
    return None


@rule("APD416", "vllm-ascend's connectors with P and D on different chip generations (A2 and A3)")
def vllm_ascend_across_generations(ctx: Context) -> Iterator[Diagnostic]:
    """vllm-ascend's disaggregated-prefill design document lists heterogeneous P and D (P on A2, D on A3) as not
    supported (docs/vllm-ascend.md)."""
    crossing = _crossing(ctx) if ctx.deployment.connector.implementation == "vllm-ascend" else None
    if crossing:
        yield ctx.diag("APD416", "error", ("instances", crossing.index, "devices"),
                       f"{crossing.text}: vllm-ascend does not support its connectors between P and D of different "
                       "chip generations (its disaggregated-prefill design, Limitations)",
                       "place every prefill and decode instance on nodes of one generation")


@rule("APD417", "the ascend-pd connector with P and D on different chip generations, which it never ran across")
def ascend_pd_across_generations(ctx: Context) -> Iterator[Diagnostic]:
    crossing = _crossing(ctx) if ctx.deployment.connector.implementation == "ascend-pd" else None
    if crossing:
        yield ctx.diag("APD417", "warning", ("instances", crossing.index, "devices"),
                       f"{crossing.text}: AscendPDConnector has never run between NPUs of two chip generations; the "
                       "KV cache layout and dtype are the same on both, but no transfer between them was verified",
                       "place every prefill and decode instance on nodes of one generation, or verify a transfer "
                       "between the two generations before serving")
