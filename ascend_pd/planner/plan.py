"""The planner end to end: requirements from workload and SLO, the search, the deployment, the predicted figures."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ascend_pd.defaults import MTP_ACCEPTANCE
from ascend_pd.deploy.schema import SLO, Deployment, Workload
from ascend_pd.errors import InputError
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.capacity import (PREDICT_REPEATS, Requirements, colocated_operating_point,
                                        decode_operating_tpot, prefill_pool, prefill_ttft)
from ascend_pd.planner.connector_choice import plan_connector
from ascend_pd.planner.modes import planned_costs
from ascend_pd.planner.prefill_queue import PrefillPool
from ascend_pd.planner.placement import build_deployment
from ascend_pd.planner.search import Choice, Progress, SearchResult, search, unit_devices
from ascend_pd.planner.workload import LengthSamples, samples

SAMPLES = 2000
MODEL_LEN_QUANTILE = 0.999  # requests longer than this share of the workload are not planned for
MODEL_LEN_STEP = 1024
CONFIRM_STEPS = 12


@dataclass(frozen=True)
class PlanInputs:
    workload: Workload
    slo: SLO
    devices: int | None = None  # budget; None: the whole cluster
    rate: float | None = None  # target requests/s; None: the most goodput within the budget
    mtp: int | None = None  # draft tokens per step; None: the model's MTP layers
    mtp_acceptance: float = MTP_ACCEPTANCE
    kv_mode: str = "push"
    connector: str | None = None  # connector.implementation; None: ascend-pd's, or vllm-ascend's for a C8 cache
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
    connector, kv_mode = plan_connector(cost, inputs.connector, inputs.kv_mode)
    return Requirements(ttft=inputs.slo.ttft_ms / 1e3, tpot=inputs.slo.tpot_ms / 1e3,
                        attainment=inputs.slo.attainment, lengths=lengths, max_model_len=max_model_len(cost, lengths),
                        mtp=mtp, mtp_acceptance=inputs.mtp_acceptance if mtp else 0.0,
                        kv_mode=kv_mode, connector=connector)


def predict(cost: CostModel, choice: Choice, units: int, req: Requirements, budget: int,
            rate: float | None = None) -> dict[str, Any]:
    """Predicted figures at `rate` (default: the plan's design rate, the most it sustains within the SLOs): TPOT at
    the batch decode ranks hold at that rate, TTFT from the prefill stage played out with the plan's rank count."""
    max_rate = choice.rate * units
    rate = max_rate if rate is None else rate
    group_rate = rate / units
    devices = choice.devices * units
    span = min(budget, unit_devices(cost.cluster))
    costs = planned_costs(cost, req.mtp)  # each role priced in the mode its rendered engine runs
    decode = choice.option("decode") or choice.option("colocated")
    decode_ranks = choice.count(decode.role) * decode.shape.dp
    if decode.role == "colocated":
        rank_rate = group_rate / decode_ranks
        tpot, per_token = colocated_operating_point(costs["colocated"], decode, req, rank_rate)
        decoding = rank_rate * float(req.lengths.output_tokens.mean()) * tpot  # Little's law
        pool = PrefillPool.fluid(req.lengths.input_tokens, per_token, PREDICT_REPEATS, decoding)
        times = pool.run(group_rate, decode_ranks).latency + cost.request_overhead()
    else:
        tpot = decode_operating_tpot(costs["decode"], decode, req, group_rate / decode_ranks)
        prefill = choice.option("prefill")
        ranks = choice.count("prefill") * prefill.shape.dp
        pool = prefill_pool(costs["prefill"], prefill, req, repeats=PREDICT_REPEATS)
        times = prefill_ttft(costs["prefill"], pool, req, group_rate, ranks, span, tpot * req.accepted)
    ttft_ok = float(np.mean(times <= req.ttft))
    ttft = {f"p{q}": float(np.percentile(times, q)) * 1e3 for q in (50, 90, 99)}
    attainment = ttft_ok if tpot <= req.tpot else 0.0
    goodput = rate * attainment
    mean_output = float(req.lengths.output_tokens.mean())
    return {
        "max_rate_rps": max_rate,
        "rate_rps": rate,
        "goodput_rps": goodput,
        "goodput_per_device": goodput / devices,
        "slo_attainment": attainment,
        "devices": devices,
        "output_tokens_per_s_per_device": rate * mean_output / devices,
        "ttft_ms": ttft,
        "tpot_ms": tpot * 1e3,
    }


def confirmed(cost: CostModel, result: SearchResult, req: Requirements, budget: int,
              rate: float | None) -> Choice:
    """The chosen deployment, held to its SLO attainment with its own prefill rank count (the search sizes prefill
    on SIZING_RANKS ranks; two-choice routing over fewer ranks queues longer). With a target rate, prefill instances
    are added while the budget allows; otherwise the design rate comes down to what the deployment sustains."""
    choice, units = result.best_disaggregated, result.units

    def attains(candidate: Choice, at: float) -> bool:
        return predict(cost, candidate, units, req, budget, at)["slo_attainment"] >= req.attainment - 1e-9

    if rate is not None:
        prefill, decode = choice.instances
        while not attains(choice, rate) and (choice.devices + prefill[0].devices) * units <= budget:
            prefill = (prefill[0], prefill[1] + 1)
            choice = replace(choice, instances=(prefill, decode), devices=choice.devices + prefill[0].devices)
        return choice
    if attains(choice, choice.rate * units):
        return choice
    low, high = 0.0, choice.rate
    for _ in range(CONFIRM_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if attains(choice, mid * units) else (low, mid)
    return replace(choice, rate=low)


def settle(cost: CostModel, result: SearchResult, req: Requirements, budget: int, rate: float | None) -> None:
    """Confirm the best disaggregated deployment with its own rank count, then choose again between it and the
    best colocated one: confirmation can add prefill instances (with a target rate) or lower the design rate."""
    if result.best_disaggregated is None:
        return
    disaggregated = confirmed(cost, result, req, budget, rate)
    colocated = result.best_colocated
    result.best_disaggregated = disaggregated
    if colocated is None:
        result.best = disaggregated
    elif rate is not None:
        better = (disaggregated.devices, -disaggregated.rate) < (colocated.devices, -colocated.rate)
        result.best = disaggregated if better else colocated
    else:
        result.best = disaggregated if disaggregated.rate_per_device >= colocated.rate_per_device else colocated


def make_plan(cost: CostModel, inputs: PlanInputs, progress: Progress | None = None) -> PlanOutcome:
    started = time.perf_counter()
    cluster = cost.cluster
    budget = inputs.devices or cluster.device_count
    if budget > cluster.device_count:
        raise InputError(f"budget of {budget} devices exceeds the {cluster.device_count} of cluster '{cluster.name}'",
                         field="--devices", fix=f"use at most {cluster.device_count}")
    req = requirements(cost, inputs)
    result = search(cost, req, budget, inputs.rate, progress)
    settle(cost, result, req, budget, inputs.rate)
    predicted = predict(cost, result.best, result.units, req, budget, inputs.rate)
    workload = inputs.workload.model_copy(update={"rate": round(predicted["rate_rps"], 3)})
    deployment = build_deployment(cost, result.best, result.units, req, workload, inputs.slo,
                                  inputs.cluster_ref or cluster.name)
    return PlanOutcome(deployment, result, req, predicted, budget, time.perf_counter() - started)
