"""Deployments the planner writes for random models, clusters, workloads, SLOs and rates: the fuzz input of the
tests that check every engine render writes (tests/unit/render/test_vllm_ascend_checks.py) and that every part of
the system addresses the same ranks (tests/unit/test_one_layout.py). Plans are made once per seed per run: the two
files share the seeds they both take."""

from __future__ import annotations

import copy
import random
from functools import lru_cache

import yaml

from tests import fuzz

PLAN_MODELS = {"atlas-800i-a2-x4": ["qwen3-32b", "llama-3.1-70b", "qwen2.5-7b", "qwen3-30b-a3b"],
               "atlas-800t-a3-x4": ["deepseek-r1", "qwen3-235b-a22b", "qwen3-32b", "llama-3.1-70b"]}
PLANS = 100


def plan_seeds() -> range:
    """The seeds of the fuzzed plans: all PLANS in CI, the profile's share of them in a local run (tests/fuzz.py)."""
    return range(fuzz.examples(PLANS, least=1))


def fuzzed_plan(seed: int) -> dict:
    """A plan for a random model, cluster, workload, SLO and rate (a fresh copy each call)."""
    return copy.deepcopy(_plan(seed))


def _must_disaggregate(seed: int) -> bool:
    """Seeds 0-9, 20-29, ...: a plan with P and D, so every block of ten consecutive seeds (the render checks run in
    blocks of `seed % 10`) checks connectors, whatever the planner prefers at the drawn rates; the others take what
    the planner chooses."""
    return seed % 20 < 10


@lru_cache(maxsize=None)
def _plan(seed: int) -> dict:
    """Draws again where no deployment meets the rate, or where a seed that must disaggregate got a colocated plan."""
    from ascend_pd.deploy import dump_deployment
    from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
    from ascend_pd.errors import InputError
    from ascend_pd.perf.context import cost_model
    from ascend_pd.planner.plan import PlanInputs, make_plan

    rng = random.Random(seed)
    while True:
        cluster = rng.choice(sorted(PLAN_MODELS))
        model = rng.choice(PLAN_MODELS[cluster])
        input_mean, output_mean = rng.choice([1000, 3000, 8000]), rng.choice([300, 1000])
        workload = Workload(input_tokens=LengthDistribution(mean=input_mean, p99=input_mean * 3),
                            output_tokens=LengthDistribution(mean=output_mean, p99=output_mean * 3), rate=1.0)
        slo = SLO(ttft_ms=rng.choice([1000, 2000, 5000]), tpot_ms=rng.choice([30, 50]), attainment=0.9)
        inputs = PlanInputs(workload, slo, rate=rng.choice([2.0, 8.0, 20.0]), kv_mode=rng.choice(["pull", "push"]),
                            cluster_ref=cluster)
        kv_dtype = rng.choice(["bf16", "bf16", "int8"])
        try:
            outcome = make_plan(cost_model(model, cluster, None, None, kv_dtype, None), inputs)
        except InputError:
            continue
        if _must_disaggregate(seed) and not any(i.role == "prefill" for i in outcome.deployment.instances):
            continue
        return yaml.safe_load(dump_deployment(outcome.deployment))
