"""The proxy's CPU per request against a baseline source tree's, both running at once on the same fake engines.

A change that costs a few microseconds per request is smaller than the difference between two processes of the same
proxy, which differ by several percent on a small shared machine. So each side runs `--instances` proxy processes, started interleaved, and every round sends the same
requests through each of them in alternating order; a side's figure is the mean of its instances' medians. The
spread between instances of one side is printed too: a ratio inside it is noise. Running the tree against itself
(`--baseline .`) shows that floor alone.

    git worktree add /tmp/base 64d2657
    python tools/bench_proxy_paired.py --baseline /tmp/base
    python tools/bench_proxy_paired.py --baseline .          # A/A: the noise floor

The proxies run one worker each, with the defaults of their own tree; CPU is counted per thread to the nanosecond
(bench_proxy.cpu_seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_proxy import Proxied, closed_loop, free_port, load_average, proxy_command, proxy_ready, \
    start_engines  # noqa: E402

from ascend_pd.proxy.event_loop import EVENT_LOOPS, run  # noqa: E402

THIS_TREE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Scenario:
    label: str
    token_delay: float  # seconds between tokens at the fake engines
    concurrency: int
    requests: int  # per proxy and round


@dataclass
class Instance:
    side: str
    proxied: Proxied
    per_request: dict[str, list[float]] = field(default_factory=dict)  # CPU seconds per request, by row, per round


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    return [Scenario("one at a time", 0.0, 1, args.idle_requests),
            Scenario(f"{args.concurrency} concurrent, {args.token_delay * 1e3:.0f} ms/token", args.token_delay,
                     args.concurrency, args.concurrent_requests),
            Scenario(f"maximum rate, {args.concurrency} concurrent", 0.0, args.concurrency, args.rate_requests)]


def source_tree(text: str) -> Path:
    tree = Path(text).resolve()
    if not (tree / "ascend_pd" / "cli" / "main.py").is_file():
        raise argparse.ArgumentTypeError(f"{tree} holds no ascend_pd/cli/main.py: give the root of an ascend-pd "
                                         f"checkout, e.g. one made with 'git worktree add /tmp/base <commit>'")
    return tree


def describe(tree: Path) -> str:
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{tree} at {commit.stdout.strip() or 'unknown commit'}{' with local changes' if dirty else ''}"


async def start_instances(engines: dict, args) -> tuple[list[Instance], list[subprocess.Popen]]:
    """`instances` proxies per side, started in turn. A tree's proxy runs from that tree: `python -m` puts the
    working directory first on sys.path, so each starts in its own root."""
    instances, processes = [], []
    for _ in range(args.instances):
        for side, tree in (("baseline", args.baseline), ("this tree", THIS_TREE)):
            port = free_port()
            env = {**os.environ, "PYTHONPATH": str(tree)}
            process = subprocess.Popen(proxy_command(port, engines, 1, args.proxy_event_loop), cwd=tree, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(process)
            url = f"http://127.0.0.1:{port}"
            await proxy_ready(url)
            instances.append(Instance(side, Proxied(url, process.pid, 1)))
    return instances, processes


async def measure(instances: list[Instance], scenario: Scenario, streaming: bool, args) -> str:
    row = f"{scenario.label}, {'streaming' if streaming else 'non-streaming'}"
    body = {"model": "fake-model", "prompt": "benchmark prompt " * 32, "max_tokens": args.tokens,
            "stream": streaming}
    for instance in instances:  # connections, caches and the allocator warmed before anything is counted
        await closed_loop(instance.proxied, body, scenario.concurrency, min(scenario.requests, 100))
    for round_ in range(args.rounds):
        for instance in instances if round_ % 2 == 0 else reversed(instances):
            before = instance.proxied.cpu_seconds()
            sample = await closed_loop(instance.proxied, body, scenario.concurrency, scenario.requests)
            if sample.failures:
                raise SystemExit(f"{row}: {sample.failures} requests through {instance.side}'s proxy failed")
            used = instance.proxied.cpu_seconds() - before
            instance.per_request.setdefault(row, []).append(used / len(sample.latencies))
    return row


def side_figures(instances: list[Instance], side: str, row: str) -> list[float]:
    """Each instance's median CPU per request over the rounds."""
    return [statistics.median(i.per_request[row]) for i in instances if i.side == side]


HEADER = (f"{'':52}{'baseline':>10}{'this tree':>11}{'ratio':>8}{'spread b':>10}{'spread t':>10}"
          f"   instances (baseline | this tree)")


def report_line(instances: list[Instance], row: str) -> str:
    base, this = side_figures(instances, "baseline", row), side_figures(instances, "this tree", row)
    mean_base, mean_this = statistics.fmean(base), statistics.fmean(this)
    return (f"{row:52}{mean_base * 1e6:10.1f}{mean_this * 1e6:11.1f}{mean_this / mean_base:8.3f}"
            f"{max(base) / min(base):10.3f}{max(this) / min(this):10.3f}   "
            f"{' '.join(f'{x * 1e6:.0f}' for x in base)} | {' '.join(f'{x * 1e6:.0f}' for x in this)}")


async def main(args: argparse.Namespace) -> None:
    print(f"baseline: {describe(args.baseline)}\nthis tree: {describe(THIS_TREE)}\n{args.instances} proxies per "
          f"side, {args.rounds} rounds; {load_average()} before")
    lines = []
    wanted = [s for s in scenarios(args) if s.requests]
    for delay in sorted({s.token_delay for s in wanted}):  # one set of engines and proxies per token delay
        engines_proc, engines = start_engines(delay, args, None)
        processes: list[subprocess.Popen] = []
        try:
            instances, processes = await start_instances(engines, args)
            for scenario in (s for s in wanted if s.token_delay == delay):
                for streaming in (True, False):
                    lines.append(report_line(instances, await measure(instances, scenario, streaming, args)))
        finally:
            for process in (*processes, engines_proc):
                process.terminate()
                process.wait(10)
    print("\nproxy CPU per request (us): mean of each side's instance medians; spread: the slowest instance of a "
          "side over its fastest")
    print(HEADER, *lines, sep="\n")
    print(load_average(), "after")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=source_tree, required=True,
                        help="root of the ascend-pd tree to compare with ('.' for this one: the noise floor)")
    parser.add_argument("--instances", type=int, default=3, help="proxy processes per side")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; each sends every proxy its requests once")
    parser.add_argument("--idle-requests", type=int, default=600, help="requests per proxy and round, one at a time (0 skips it)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--concurrent-requests", type=int, default=640,
                        help="requests per proxy and round with engines that wait between tokens (0 skips it)")
    parser.add_argument("--rate-requests", type=int, default=2000,
                        help="requests per proxy and round with engines that do not wait (0 skips it)")
    parser.add_argument("--token-delay", type=float, default=0.02, help="seconds between tokens (concurrent rows)")
    parser.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--prefills", type=int, default=2)
    parser.add_argument("--decodes", type=int, default=2)
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                        help="event loop of the fake engines and the load generator")
    parser.add_argument("--proxy-event-loop", choices=EVENT_LOOPS, default="auto", help="event loop of the proxies")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    run(main(arguments), arguments.event_loop)
