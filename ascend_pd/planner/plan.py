"""The planner end to end: requirements from workload and SLO, the search, the deployment, the predicted figures."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ascend_pd.deploy.schema import SLO, Deployment, Workload
from ascend_pd.errors import InputError
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.capacity import ROUTING_POOL, Requirements, ttft_attainment, ttft_inputs, ttft_quantile
from ascend_pd.planner.placement import build_deployment
from ascend_pd.planner.search import Choice, Progress, SearchResult, search, unit_devices
from ascend_pd.planner.workload import LengthSamples, samples

SAMPLES = 2000
MODEL_LEN_QUANTILE = 0.999  # requests longer than this share of the workload are not planned for
MODEL_LEN_STEP = 1024


@dataclass(frozen=True)
class PlanInputs:
    workload: Workload
    slo: SLO
    devices: int | None = None  # budget; None: the whole cluster
    rate: float | None = None  # target requests/s; None: the most goodput within the budget
    mtp: int | None = None  # draft tokens per step; None: the model's MTP layers
    mtp_acceptance: float = 0.7
    kv_mode: str = "push"
    cluster_ref: str = ""
    base_dir: Path | None = None  # where a relative workload trace path is resolved


@dataclass
class PlanOutcome:
    deployment: Deployment
    result: SearchResult
    requirements: Requirements
    predicted: dict[str, Any]
    budget: int
    search_seconds: float


def max_model_len(cost: CostModel, lengths: LengthSamples) -> int:
    """The longest request planned for: the workload's 99.9th percentile of prompt + output, rounded up to a
    multiple of 1024, within the model's context window."""
    longest = float(np.quantile(lengths.total, MODEL_LEN_QUANTILE))
    return int(min(cost.model.max_position_embeddings, math.ceil(longest / MODEL_LEN_STEP) * MODEL_LEN_STEP))


def requirements(cost: CostModel, inputs: PlanInputs) -> Requirements:
    lengths = samples(inputs.workload, SAMPLES, base_dir=inputs.base_dir)
    mtp = cost.model.mtp_layers if inputs.mtp is None else inputs.mtp
    return Requirements(ttft=inputs.slo.ttft_ms / 1e3, tpot=inputs.slo.tpot_ms / 1e3,
                        attainment=inputs.slo.attainment, lengths=lengths, max_model_len=max_model_len(cost, lengths),
                        mtp=mtp, mtp_acceptance=inputs.mtp_acceptance if mtp else 0.0, kv_mode=inputs.kv_mode)


def predict(cost: CostModel, choice: Choice, units: int, req: Requirements, budget: int,
            rate: float | None = None) -> dict[str, Any]:
    """Predicted figures at `rate` (default: the plan's design rate, the most it sustains within the SLOs)."""
    max_rate = choice.rate * units
    rate = max_rate if rate is None else rate
    devices = choice.devices * units
    first = choice.option("prefill") or choice.option("colocated")
    ranks = choice.count(first.role) * first.shape.dp
    service, extra = ttft_inputs(cost, first, req, min(budget, unit_devices(cost.cluster)))
    pair_rate = rate / units / ranks * ROUTING_POOL  # what two ranks sharing a queue receive
    attainment = ttft_attainment(pair_rate, service, extra, req.ttft, ROUTING_POOL)
    tpot = max(o.tpot for o, _ in choice.instances if o.role != "prefill")
    goodput = rate * attainment if tpot <= req.tpot else 0.0
    mean_output = float(req.lengths.output_tokens.mean())
    return {
        "max_rate_rps": max_rate,
        "rate_rps": rate,
        "goodput_rps": goodput,
        "goodput_per_device": goodput / devices,
        "slo_attainment": attainment,
        "devices": devices,
        "output_tokens_per_s_per_device": rate * mean_output / devices,
        "ttft_ms": {f"p{q}": ttft_quantile(pair_rate, service, extra, q / 100, ROUTING_POOL) * 1e3
                    for q in (50, 90, 99)},
        "tpot_ms": tpot * 1e3,
    }


def make_plan(cost: CostModel, inputs: PlanInputs, progress: Progress | None = None) -> PlanOutcome:
    started = time.perf_counter()
    cluster = cost.cluster
    budget = inputs.devices or cluster.device_count
    if budget > cluster.device_count:
        raise InputError(f"budget of {budget} devices exceeds the {cluster.device_count} of cluster '{cluster.name}'",
                         field="--devices", fix=f"use at most {cluster.device_count}")
    req = requirements(cost, inputs)
    result = search(cost, req, budget, inputs.rate, progress)
    predicted = predict(cost, result.best, result.units, req, budget, inputs.rate)
    workload = inputs.workload.model_copy(update={"rate": round(predicted["rate_rps"], 3)})
    deployment = build_deployment(cost, result.best, result.units, req, workload, inputs.slo,
                                  inputs.cluster_ref or cluster.name)
    return PlanOutcome(deployment, result, req, predicted, budget, time.perf_counter() - started)
