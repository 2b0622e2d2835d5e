"""Time `ascend-pd plan` and `ascend-pd simulate`, and compare the planner's goodput with the simulator's.

Usage: python tools/bench_planner.py [--runs 5] [--skip-agreement] [--superpods 1,10,32,64]

Prints the median wall time of several in-process plan runs for DeepSeek-R1 on cloudmatrix384 (target < 10 s) and
Qwen3-32B on atlas-800i-a2-x4 (target < 2 s); for the workload and SLO of each shipped example deployment, the
planner's predicted goodput next to the simulated one; and, for SuperClusters of N CloudMatrix384 SuperPoDs
(tools/make_cluster.py), the wall time and peak memory of `ascend-pd plan`, `validate`, `render` and `simulate` run
as commands (target: each under 30 s at 64 SuperPoDs, growing at most linearly from 10 to 64).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
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
from make_cluster import cluster_of_superpods

SIM_DURATION = 120.0  # the `ascend-pd simulate` default
SIM_REQUESTS = 15000  # at low rates 120 s holds too few requests for a steady p90


def time_plan(model: str, cluster: str, runs: int) -> tuple[float, float, float]:
    """Median wall seconds of a full plan (search and all six files), its CPU seconds (what the wall time would be
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


def agreement(example: str) -> tuple[str, dict, dict, float]:
    """The example's workload and SLO, planned, then simulated at the plan's design rate for long enough to hold
    some 15,000 requests (at least SIM_DURATION): (plan label, predicted, simulated, simulation seconds)."""
    shipped = yaml.safe_load((configs_dir() / "deployments" / f"{example}.yaml").read_text())
    workload, slo = Workload(**shipped["workload"]), SLO(**shipped["slo"])
    cost = cost_model(shipped["model"]["name"], shipped["cluster"], None, shipped["model"]["quantization"])
    outcome = make_plan(cost, PlanInputs(workload, slo))
    duration = max(SIM_DURATION, SIM_REQUESTS / outcome.predicted["rate_rps"])
    started = time.perf_counter()
    simulated = simulate(outcome.deployment, cost, outcome.deployment.workload, slo, duration, duration / 4)
    return outcome.result.best.label(), outcome.predicted, simulated, time.perf_counter() - started


def _high_water_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_command(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one command, as its own process. The peak is the process's own VmHWM,
    read until it exits: getrusage's figure for a child also counts the bench process it was forked from."""
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a chatty command never blocks on it
        started = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors)
        peak = 0.0
        while child.poll() is None:
            peak = max(peak, _high_water_mib(child.pid) or 0.0)
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        if child.returncode not in (0, 1):  # validate exits 1 on errors, which the plan must not have
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed: {errors.read().decode()[-2000:]}")
    return seconds, peak


def superclusters(counts: list[int]) -> None:
    cli = shutil.which("ascend-pd") or str(Path(sys.executable).with_name("ascend-pd"))
    source = yaml.safe_load((configs_dir() / "clusters" / "cloudmatrix384-x2.yaml").read_text())
    print("SuperClusters of CloudMatrix384: DeepSeek-R1, default workload, each step as a command")
    print(f"{'SuperPoDs':>9} {'devices':>8} {'instances':>9} " +
          " ".join(f"{step + ' s':>11} {'MiB':>5}" for step in ("plan", "validate", "render", "simulate")))
    for count in counts:
        with tempfile.TemporaryDirectory() as work:
            cluster = Path(work) / "cluster.yaml"
            cluster.write_text(yaml.safe_dump(cluster_of_superpods(source, count), sort_keys=False))
            plan_dir, deployment = Path(work) / "plan", Path(work) / "plan" / "deployment.yaml"
            figures = [run_command([cli, "plan", "--model", "deepseek-r1", "--cluster", str(cluster),
                                    "--out", str(plan_dir)]),
                       run_command([cli, "validate", str(deployment)]),
                       run_command([cli, "render", str(deployment), "--out", str(Path(work) / "rendered")]),
                       run_command([cli, "simulate", str(deployment)])]
            instances = yaml.safe_load(deployment.read_text())["instances"]
            print(f"{count:9d} {count * 768:8d} {len(instances):9d} " +
                  " ".join(f"{seconds:11.1f} {mib:5.0f}" for seconds, mib in figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-agreement", action="store_true")
    parser.add_argument("--superpods", default="1,10,32,64",
                        help="SuperPoD counts of the SuperCluster table, comma-separated ('' skips it)")
    args = parser.parse_args()

    print(f"plan timings, median of {args.runs} runs (seconds)")
    print(f"{'case':40} {'full plan':>10} {'cpu':>6} {'search':>8} {'target':>7}")
    for model, cluster, target in (("deepseek-r1", "cloudmatrix384", 10.0), ("qwen3-32b", "atlas-800i-a2-x4", 2.0)):
        full, cpu, search = time_plan(model, cluster, args.runs)
        print(f"{model + ' on ' + cluster:40} {full:10.2f} {cpu:6.2f} {search:8.2f} {target:7.1f}")
    if args.superpods:
        print()
        superclusters([int(n) for n in args.superpods.split(",")])
    if args.skip_agreement:
        return
    print()
    print("planner vs simulator at the plan's design rate (simulated for 15,000 requests or 120 s, whichever is "
          "longer; the first quarter left out)")
    print(f"{'example workload':30} {'plan':40} {'figure':14} {'planner':>9} {'simulator':>9} {'sim/plan':>8}")
    for example in sorted(p.stem for p in (configs_dir() / "deployments").glob("*.yaml")):
        label, predicted, simulated, _ = agreement(example)
        figures = (("goodput req/s", predicted["goodput_rps"], simulated["goodput_rps"]),
                   ("TTFT p50 ms", predicted["ttft_ms"]["p50"], simulated["ttft_ms"]["p50"]),
                   ("TTFT p90 ms", predicted["ttft_ms"]["p90"], simulated["ttft_ms"]["p90"]),
                   ("TPOT ms", predicted["tpot_ms"], simulated["tpot_ms"]["p50"]))
        for i, (name, planned, sim) in enumerate(figures):
            print(f"{example if i == 0 else '':30} {label if i == 0 else '':40} {name:14} {planned:9.1f} "
                  f"{sim:9.1f} {sim / planned:8.3f}")

if __name__ == "__main__":
    main()
