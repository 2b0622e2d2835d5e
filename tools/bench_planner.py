"""Time `ascend-pd plan` and `ascend-pd simulate`, and compare the planner's goodput with the simulator's.

Usage: python tools/bench_planner.py [--runs 5] [--skip-agreement]

Prints the median wall time of several in-process plan runs for DeepSeek-R1 on cloudmatrix384 (target < 10 s) and
Qwen3-32B on atlas-800i-a2-x4 (target < 2 s), the time of one default-length simulation of the CloudMatrix384 plan
(target < 30 s), and, for the workload and SLO of each shipped example deployment, the planner's predicted goodput
next to the simulated one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from ascend_pd.deploy.schema import SLO, Workload
from ascend_pd.hardware import configs_dir
from ascend_pd.perf.context import cost_model
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.report import write_outputs
from ascend_pd.planner.simulator import simulate
from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD

SIM_DURATION, SIM_WARMUP = 120.0, 30.0  # the `ascend-pd simulate` defaults


def time_plan(model: str, cluster: str, runs: int) -> tuple[float, float, float]:
    """Median wall seconds of a full plan (search and all five files), its CPU seconds (what the wall time would be
    on an idle machine, as the planner runs on one core), and the wall seconds of the search alone."""
    full, cpu, search = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as out:
            started, started_cpu = time.perf_counter(), time.process_time()
            cost = cost_model(model, cluster)
            outcome = make_plan(cost, PlanInputs(DEFAULT_WORKLOAD, DEFAULT_SLO, cluster_ref=cluster))
            write_outputs(cost, outcome, Path(out))
            full.append(time.perf_counter() - started)
            cpu.append(time.process_time() - started_cpu)
            search.append(outcome.search_seconds)
    return statistics.median(full), statistics.median(cpu), statistics.median(search)


def agreement(example: str) -> tuple[str, float, float, float]:
    shipped = yaml.safe_load((configs_dir() / "deployments" / f"{example}.yaml").read_text())
    workload, slo = Workload(**shipped["workload"]), SLO(**shipped["slo"])
    cost = cost_model(shipped["model"]["name"], shipped["cluster"], None, shipped["model"]["quantization"])
    outcome = make_plan(cost, PlanInputs(workload, slo))
    started = time.perf_counter()
    simulated = simulate(outcome.deployment, cost, outcome.deployment.workload, slo, SIM_DURATION, SIM_WARMUP)
    return (outcome.result.best.label(), outcome.predicted["goodput_rps"], simulated["goodput_rps"],
            time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-agreement", action="store_true")
    args = parser.parse_args()

    print(f"plan timings, median of {args.runs} runs (seconds)")
    print(f"{'case':40} {'full plan':>10} {'cpu':>6} {'search':>8} {'target':>7}")
    for model, cluster, target in (("deepseek-r1", "cloudmatrix384", 10.0), ("qwen3-32b", "atlas-800i-a2-x4", 2.0)):
        full, cpu, search = time_plan(model, cluster, args.runs)
        print(f"{model + ' on ' + cluster:40} {full:10.2f} {cpu:6.2f} {search:8.2f} {target:7.1f}")
    if args.skip_agreement:
        return
    print()
    print(f"planner vs simulator goodput ({SIM_DURATION:g} s of arrivals, first {SIM_WARMUP:g} s left out)")
    print(f"{'example workload':34} {'plan':44} {'predicted':>9} {'simulated':>9} {'sim/pred':>8} {'sim s':>6}")
    print("(goodput in requests/s meeting both SLOs, at the plan's design rate)")
    for example in sorted(p.stem for p in (configs_dir() / "deployments").glob("*.yaml")):
        label, predicted, simulated, seconds = agreement(example)
        print(f"{example:34} {label:44} {predicted:9.2f} {simulated:9.2f} {simulated / predicted:8.3f} "
              f"{seconds:6.1f}")


if __name__ == "__main__":
    main()
