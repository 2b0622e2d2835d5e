"""Pricing on a cluster that mixes chips (910B and 910C nodes, say): each instance on the chip of the nodes it runs
on, with those nodes as the cluster its groups span, and a step that prices a whole deployment on its one group."""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.models import ModelSpec
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel


def whole_cluster(model: ModelSpec, cluster: Cluster, quantization: str, kv_dtype: str,
                  calibration: str | None, version: str | None = None) -> CostModel:
    """A cost model over all of `cluster`, for a caller that prices each instance on its own nodes (`on_nodes`) and
    reads the whole cluster only for the links between instances. Its own chip is the first node's, so on a
    cluster that mixes chips only what is the same for every chip may be read from it directly."""
    chip = cluster.chips[0]
    return CostModel(model, chip, cluster, quantization, kv_dtype, load_calibration(calibration, chip.id, version))


def on_chip(cost: CostModel, chip_id: str) -> CostModel:
    """`cost` on the chip group `chip_id` of its cluster: that chip's peaks and memory, its calibration (the same
    profile or file, with the chip's own values), and the group's nodes for the link tiers TP and EP groups cross.
    On a cluster of one chip, `cost` itself."""
    group = cost.cluster.chip_groups[chip_id]
    if group is cost.cluster:
        return cost
    calibration = load_calibration(cost.cal.name, chip_id, cost.cal.engine_version)
    return replace(cost, chip=group.chip, cluster=group, calibration=calibration)


def on_nodes(cost: CostModel, nodes: Iterable[str], who: str) -> CostModel:
    """`cost` on the chip of `nodes`, the nodes of `who` (an instance). Validation refuses an instance across two
    chips (APD109), so meeting one here means the deployment was not validated."""
    chips = cost.cluster.chips_of(nodes)
    if len(chips) != 1:
        found = " and ".join(chip.id for chip in chips) or "no node of the cluster"
        raise InputError(f"{who} runs on {found}; an engine is priced on the one chip its nodes carry",
                         field="instances", fix="place every device of an instance on nodes of one chip "
                                                "(`ascend-pd validate`, APD109)")
    return on_chip(cost, chips[0].id)


def deployment_group(cluster: Cluster, nodes: Iterable[str], file: str, step: str) -> Cluster:
    """The chip group of `cluster` that all of a deployment's `nodes` belong to, for a `step` that prices the whole
    deployment on one chip (a re-plan, a calibration fit); an error when they carry two chips."""
    chips = cluster.chips_of(nodes)
    if len(chips) > 1:
        raise InputError(f"the deployment's instances run on {' and '.join(c.id for c in chips)} nodes, and {step} "
                         "prices one chip", file=file, field="instances",
                         fix=f"run {step} on a deployment whose instances run on nodes of one chip")
    return cluster.chip_groups[chips[0].id] if chips else cluster
