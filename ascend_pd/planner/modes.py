"""The execution mode of each engine, as its launch flags set it: what the cost model prices an instance with.

A deployment's instances give their own flags; a plan prices the engines it will render, so it reads the flags of
stand-in instances built with the arguments placement.py gives each role.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

from ascend_pd.deploy.engine_flags import execution_mode
from ascend_pd.deploy.schema import Deployment, DevicePlacement, Instance, VllmArgs
from ascend_pd.hardware.platform import Platform, platform_of
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.exec_mode import ExecMode
from ascend_pd.perf.on_chip import on_nodes

ROLES = ("prefill", "decode", "colocated")


def instance_cost(cost: CostModel, deployment: Deployment, instance: Instance) -> CostModel:
    """`cost` on the chip of `instance`'s nodes, in the mode its engine runs."""
    priced = on_nodes(cost, (p.node for p in instance.devices), f"instance '{instance.name}'")
    mode = execution_mode(platform_of(priced.cluster), deployment.connector.implementation, instance,
                          mla=cost.model.mla is not None, version=cost.cal.engine_version)
    return replace(priced, mode=mode)


def draft_args(role: str, mtp: int) -> list[str]:
    """The `--speculative-config` a plan renders. Every role of an MTP plan builds the draft layers: they own KV
    caches, and P and D must register the same set. Prefill emits one token, so it drafts one (vllm-ascend's PD
    guide: 1 on P, at least 1 on D)."""
    if not mtp:
        return []
    tokens = 1 if role == "prefill" else mtp
    return ["--speculative-config", json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": tokens})]


@cache
def planned_modes(platform: Platform, mtp: int, mla: bool, version: str | None = None) -> dict[str, ExecMode]:
    """The mode of the engine a plan renders for each role with `mtp` draft tokens, on vllm-ascend `version`. Graph
    mode and async scheduling follow from the role, the platform, the draft and the release, not from the
    instance's size, so a stand-in instance of each role tells (the planner asks once per search, and again for
    every prediction)."""
    return {role: execution_mode(platform, "ascend-pd", Instance(
        name=role, role=role, devices=[DevicePlacement(node="plan", devices=[0])], http_port=1, kv_port=1,
        vllm=VllmArgs(extra_args=draft_args(role, mtp))), mla, version) for role in ROLES}


def planned_costs(cost: CostModel, mtp: int) -> dict[str, CostModel]:
    """`cost` in the mode of the engine a plan renders for each role."""
    modes = planned_modes(platform_of(cost.cluster), mtp, cost.model.mla is not None, cost.cal.engine_version)
    return {role: replace(cost, mode=mode) for role, mode in modes.items()}
