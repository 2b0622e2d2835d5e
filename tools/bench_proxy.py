"""Latency the PD proxy adds, and the request rate it sustains, against fake vLLM engines on loopback.

Three processes: fake P and D engines (tools/fake_vllm.py), the proxy (`ascend-pd proxy`, pull flow) and this load
generator. "Direct" is the load generator doing the proxy's job itself (P with one output token, then D with P's
kv_transfer_params) against the same engines, so proxied minus direct is what the proxy costs. Direct and proxied
requests run side by side in the same window, so a neighbour's load on a shared machine hits both alike.

To keep the figure about the proxy and not about CPU queueing between the three processes:
- the fake engines and the load generator run on uvloop (`--event-loop`), so they cost less CPU;
- `--pin` gives the proxy a CPU of its own (the last one; the engines and the load generator get the others, with
  os.sched_setaffinity). It is off by default: on a 2-core machine the engines and the load generator then share
  one core, which 64 + 64 streams saturate (direct p50 695 ms pinned against 416 ms unpinned in one pair of runs,
  16 tokens at 20 ms), so pinning measured CPU queueing on that core rather than the proxy.
Other processes on the machine share every core either way: the load average is printed with every table.
The proxy's own event loop is `--proxy-event-loop` (auto: uvloop when installed), to compare the two loops.

Every table has a row per proxy worker count (`--workers`, default 1 and the cores available), the proxies all
running from the start; the proxy's CPU is its supervisor's and every worker's.

    python tools/bench_proxy.py          # one at a time, 64 concurrent streams, then the maximum rate
    python tools/bench_proxy.py --concurrency 16 --requests 500 --tokens 32
    python tools/bench_proxy.py --proxy-event-loop asyncio     # the same, with the proxy on asyncio's loop
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec

from ascend_pd.deploy import handoff
from ascend_pd.proxy.event_loop import EVENT_LOOPS, resolve, run
from ascend_pd.proxy.openai_body import decode_body, prefill_body
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the fake engines live in tests/fakes
from tests.fakes.vllm_api import wait_healthy  # noqa: E402
from tests.ports import free_port  # noqa: E402

TOOLS = Path(__file__).resolve().parent


@dataclass
class Sample:
    latencies: list[float] = field(default_factory=list)  # seconds, send to last byte
    failures: int = 0
    elapsed: float = 0.0

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


class Direct:
    """The client does the handoff itself: P, then D with P's kv_transfer_params."""

    def __init__(self, engines: dict):
        self._prefills = itertools.cycle([e["url"] for e in engines["prefill"]])
        self._decodes = itertools.cycle([e["url"] for e in engines["decode"]])

    async def __call__(self, session: aiohttp.ClientSession, body: dict) -> bool:
        to_prefill = prefill_body(body, handoff.encode(handoff.ToPrefill()))
        async with session.post(next(self._prefills) + "/v1/completions",
                                data=msgspec.json.encode(to_prefill)) as answer:
            params = msgspec.json.decode(await answer.read()).get("kv_transfer_params")
        async with session.post(next(self._decodes) + "/v1/completions",
                                data=msgspec.json.encode(decode_body(body, params))) as answer:
            return answer.status == 200 and bool(await answer.read())


class Proxied:
    def __init__(self, url: str, pid: int, workers: int):
        self._url = url + "/v1/completions"
        self.pid = pid
        self.workers = workers

    @property
    def label(self) -> str:
        return f"{self.workers} worker{'s' if self.workers > 1 else ''}"

    def cpu_seconds(self) -> float:
        """CPU the proxy has used so far: its supervisor and every worker process."""
        return sum(cpu_seconds(pid) for pid in process_tree(self.pid))

    async def __call__(self, session: aiohttp.ClientSession, body: dict) -> bool:
        async with session.post(self._url, data=msgspec.json.encode(body)) as answer:
            return answer.status == 200 and bool(await answer.read())


async def closed_loop(client, body: dict, concurrency: int, requests: int) -> Sample:
    """`concurrency` workers, each sending its next request when the last one ends, until `requests` are done."""
    sample = Sample()
    remaining = iter(range(requests))
    connector = aiohttp.TCPConnector(limit=0)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        async def worker():
            for _ in remaining:
                started = time.perf_counter()
                try:
                    ok = await client(session, body)
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    sample.latencies.append(time.perf_counter() - started)
                else:
                    sample.failures += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        sample.elapsed = time.perf_counter() - started
    return sample


def start(command: list[str], cpus: set[int] | None) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if cpus:  # before the child's event loop starts: its later threads inherit the mask
        os.sched_setaffinity(process.pid, cpus)
    return process


def start_engines(token_delay: float, args, cpus: set[int] | None) -> tuple[subprocess.Popen, dict]:
    """Fake P and D engines in one process; returns it and their urls by role."""
    process = start([sys.executable, str(TOOLS / "fake_vllm.py"), "--prefill", str(args.prefills), "--decode",
                     str(args.decodes), "--token-delay", str(token_delay), "--event-loop", args.event_loop], cpus)
    return process, json.loads(process.stdout.readline())


def proxy_command(port: int, engines: dict, workers: int, event_loop: str) -> list[str]:
    command = [sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "warning", "--max-inflight", "4096", "--event-loop", event_loop,
               "--workers", str(workers)]
    for role in ("prefill", "decode"):
        for engine in engines[role]:
            command += [f"--{role}", engine["url"]]
    return command


def placement(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """CPUs of (the proxy, the engines and this load generator): the proxy alone on the last CPU when pinning."""
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min) {five:.2f} (5 min)"


async def proxy_ready(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        try:
            await wait_healthy(session, url)
        except TimeoutError as error:
            raise SystemExit(str(error)) from None


def cpu_seconds(pid: int) -> float:
    """CPU time a process's threads have run so far, to the nanosecond (Linux /proc/<pid>/task/*/schedstat); 0 for
    one that is gone. /proc/<pid>/stat's utime and stime are counted in 10 ms clock ticks, charged to whichever
    process a tick finds running: too coarse for a proxy that runs 0.4 ms per request between waits."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def process_tree(pid: int) -> list[int]:
    """A process and its descendants (Linux /proc/<pid>/task/<tid>/children)."""
    tree = [pid]
    for process in tree:
        for task in Path(f"/proc/{process}/task").glob("*"):
            try:
                tree.extend(int(child) for child in (task / "children").read_text().split())
            except FileNotFoundError:
                continue
    return tree


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f}"


async def side_by_side(direct, proxied, body: dict, concurrency: int, requests: int) -> tuple[Sample, Sample]:
    """`concurrency` direct and `concurrency` proxied workers at the same time, each worker switching sides after
    every request, so both sides see the same machine at the same moment."""
    samples = {"direct": Sample(), "proxied": Sample()}
    remaining = iter(range(2 * requests))
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, headers={"Content-Type": "application/json"}) as session:
        async def worker(first: int):
            turn = itertools.cycle([("direct", direct), ("proxied", proxied)][first:] +
                                   [("direct", direct), ("proxied", proxied)][:first])
            for _ in remaining:
                name, client = next(turn)
                started = time.perf_counter()
                try:
                    ok = await client(session, body)
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    samples[name].latencies.append(time.perf_counter() - started)
                else:
                    samples[name].failures += 1

        await asyncio.gather(*(worker(k % 2) for k in range(2 * concurrency)))
    return samples["direct"], samples["proxied"]


async def latency_table(direct, proxies, args, concurrency: int, token_delay: float, requests: int) -> None:
    print(f"\nadded latency (send to last byte) at {concurrency} concurrent requests through the proxy and "
          f"{concurrency} direct, {args.tokens} output tokens, {token_delay * 1e3:.0f} ms per token, "
          f"{requests} requests per side; {load_average()} before")
    print(f"{'':26}{'direct p50':>12}{'proxied p50':>12}{'added p50':>11}{'direct p99':>12}{'proxied p99':>12}"
          f"{'added p99':>11}{'proxy CPU/req':>15}  (ms)")
    for streaming, proxied in itertools.product((True, False), proxies):
        body = {"model": "fake-model", "prompt": "benchmark prompt " * 32, "max_tokens": args.tokens,
                "stream": streaming}
        cpu_before = proxied.cpu_seconds()
        d, p = await side_by_side(direct, proxied, body, concurrency, requests)
        cpu_per_request = (proxied.cpu_seconds() - cpu_before) / max(1, len(p.latencies))
        label = f"{'streaming' if streaming else 'non-streaming'}, {proxied.label}"
        print(f"{label:26}{ms(d.quantile(0.5)):>12}{ms(p.quantile(0.5)):>12}"
              f"{ms(p.quantile(0.5) - d.quantile(0.5)):>11}{ms(d.quantile(0.99)):>12}{ms(p.quantile(0.99)):>12}"
              f"{ms(p.quantile(0.99) - d.quantile(0.99)):>11}{ms(cpu_per_request):>15}"
              f"   failures {d.failures}/{p.failures}")
    print(load_average(), "after")


async def rate_table(direct, proxies, args) -> None:
    print(f"\nmaximum sustained rate, engines without delays, {args.rate_concurrency} concurrent, "
          f"{args.rate_requests} requests, {args.tokens} output tokens; {load_average()} before")
    print(f"{'':26}{'direct req/s':>14}{'proxied req/s':>15}{'proxied/direct':>16}{'proxy CPU ms/req':>18}"
          f"{'vs 1 worker':>13}")
    for streaming in (True, False):
        body = {"model": "fake-model", "prompt": "benchmark prompt " * 32, "max_tokens": args.tokens,
                "stream": streaming}
        one_worker = None
        for proxied in proxies:
            d = await closed_loop(direct, body, args.rate_concurrency, args.rate_requests)
            cpu_before = proxied.cpu_seconds()
            p = await closed_loop(proxied, body, args.rate_concurrency, args.rate_requests)
            cpu_per_request = (proxied.cpu_seconds() - cpu_before) / max(1, len(p.latencies))
            one_worker = one_worker or p.rate
            label = f"{'streaming' if streaming else 'non-streaming'}, {proxied.label}"
            print(f"{label:26}{d.rate:>14.0f}{p.rate:>15.0f}{p.rate / d.rate:>16.2f}{cpu_per_request * 1e3:>18.2f}"
                  f"{p.rate / one_worker:>13.2f}   failures {d.failures}/{p.failures}")
    print(load_average(), "after")


async def run_with_engines(token_delay: float, args, body) -> None:
    proxy_cpus, other_cpus = placement(args.pin)
    engines_proc, engines = start_engines(token_delay, args, other_cpus)
    proxy_procs = []
    try:
        proxies = []
        for workers in args.workers:  # every proxy runs from the start, so they see the same engines alike
            port = free_port()
            proxy_procs.append(start(proxy_command(port, engines, workers, args.proxy_event_loop), proxy_cpus))
            url = f"http://127.0.0.1:{port}"
            await proxy_ready(url)
            proxies.append(Proxied(url, proxy_procs[-1].pid, workers))
        await body(Direct(engines), proxies)
    finally:
        for process in (*proxy_procs, engines_proc):
            process.terminate()
            process.wait(10)


async def main(args: argparse.Namespace) -> None:
    proxy_cpus, other_cpus = placement(args.pin)
    if other_cpus:
        os.sched_setaffinity(0, other_cpus)
    where = (f"proxy pinned to CPU {sorted(proxy_cpus)}, engines and load generator to CPU {sorted(other_cpus)}"
             if proxy_cpus else "no CPU pinning")
    print(f"cpus {os.cpu_count()}; {where}; event loop of the proxy {resolve(args.proxy_event_loop)}, of the engines "
          f"and the load generator {resolve(args.event_loop)}; {load_average()} before")
    if args.idle_requests:  # one request at a time: what the proxy's own work costs, without queueing
        await run_with_engines(0.0, args, lambda d, p: latency_table(d, p, args, 1, 0.0, args.idle_requests))
    if args.requests:
        await run_with_engines(args.token_delay, args, lambda d, p: latency_table(d, p, args, args.concurrency,
                                                                                  args.token_delay, args.requests))
    if args.rate_requests:
        await run_with_engines(0.0, args, lambda d, p: rate_table(d, p, args))
    print(f"\n{load_average()} after (the benchmark itself keeps both cores busy)")


def worker_counts(text: str) -> list[int]:
    counts = sorted({int(word) for word in text.split(",") if word.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("worker counts are integers of 1 or more, e.g. 1,2")
    return counts


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-requests", type=int, default=2000,
                        help="requests per side sent one at a time, engines without delays (0 skips it)")
    parser.add_argument("--concurrency", type=int, default=64, help="concurrent requests for the latency table")
    parser.add_argument("--requests", type=int, default=2000,
                        help="requests per side for the latency table (0 skips it)")
    parser.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    parser.add_argument("--token-delay", type=float, default=0.02, help="seconds between tokens (latency table)")
    parser.add_argument("--rate-concurrency", type=int, default=64, help="concurrent requests for the rate table")
    parser.add_argument("--rate-requests", type=int, default=3000, help="requests per side for the rate table "
                                                                        "(0 skips it)")
    parser.add_argument("--prefills", type=int, default=2)
    parser.add_argument("--decodes", type=int, default=2)
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                        help="event loop of the fake engines and the load generator (auto: uvloop when installed)")
    parser.add_argument("--proxy-event-loop", choices=EVENT_LOOPS, default="auto", help="event loop of the proxy")
    parser.add_argument("--workers", type=worker_counts, default=worker_counts(f"1,{len(os.sched_getaffinity(0))}"),
                        help="proxy worker counts to compare, comma-separated [default: 1 and the cores available]")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=False,
                        help="give the proxy a CPU of its own, the engines and the load generator the others")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    run(main(arguments), arguments.event_loop)
