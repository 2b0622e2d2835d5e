"""Soak the PD proxy: thousands of requests while backends are killed and restarted and clients walk away.

The proxy runs as `ascend-pd proxy --deployment` in its own process; the fake engines and the clients run here.
Every answer is checked: a 200 must carry exactly the tokens the fake D derives from the prompt (streams must end
with [DONE] or an SSE error event); anything else must be an HTTP error with a JSON body. At the end the proxy must
hold no load on any backend.

Memory: after `--warmup` requests the proxy's RSS is sampled every `--sample-every` requests; the series is printed
with its least-squares slope (KiB per 1,000 requests) and the change between the two halves of the run, so a plateau
and a steady leak tell apart. With `--tracemalloc DIR` the proxy traces its allocations
(ASCEND_PD_PROXY_TRACEMALLOC, ascend_pd/proxy/memory_trace.py), writes a snapshot at every sample, and the lines that
grew most between the first and the last sample are printed.

    python tools/soak_proxy.py --requests 10000 --mode pull
    python tools/soak_proxy.py --requests 30000 --mode pull --tracemalloc /tmp/soak-trace
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import msgspec

from bench_proxy import process_tree  # tools/ is this script's directory
from prometheus_client.parser import text_string_to_metric_families

from ascend_pd.proxy.memory_trace import ENV_VAR as TRACEMALLOC_ENV
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the fake engines live in tests/fakes
from tests.fakes.vllm_api import Behaviour, FakeEngine, fake_tokens, wait_healthy  # noqa: E402
from tests.ports import free_port  # noqa: E402

CONNECTORS = {"pull": "{implementation: ascend-pd, mode: pull, protocol: tcp}",
              "push": "{implementation: ascend-pd, mode: push, protocol: tcp}",
              "layerwise": "{implementation: vllm-ascend, mode: push, protocol: tcp}"}


def deployment_yaml(engines: list[FakeEngine], mode: str, proxy_port: int) -> str:
    instances = []
    for index, engine in enumerate(engines):
        instances.append(f"""  - name: {engine.role}-{index}
    role: {engine.role}
    devices: [{{node: localhost-00, devices: [{index % 4}]}}]
    http_port: {engine.port}
    kv_port: {engine.kv_port}""")
    return f"""apiVersion: ascend-pd/v1
kind: Deployment
metadata: {{name: soak}}
cluster: local-cpu
model: {{name: tiny-llama-gqa, path: /models/tiny}}
connector: {CONNECTORS[mode]}
instances:
{chr(10).join(instances)}
proxy: {{node: localhost-00, port: {proxy_port}}}
"""


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def slope_per_1000(samples: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS bytes against the request index, in bytes per 1,000 requests."""
    n = len(samples)
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    spread = sum((x - mean_x) ** 2 for x, _ in samples)
    return 1000 * sum((x - mean_x) * (y - mean_y) for x, y in samples) / spread if spread else 0.0


class MemorySampler:
    """RSS of the proxy after every `every` requests once `warmup` requests are done; optionally a tracemalloc
    snapshot at the same moments (SIGUSR1 to a proxy started with the tracing variable)."""

    def __init__(self, pid: int, warmup: int, every: int, traced: bool):
        self.pid, self.warmup, self.every, self.traced = pid, warmup, every, traced
        self.samples: list[tuple[int, int]] = []
        self._done = 0

    def request_done(self) -> None:
        self._done += 1
        if self._done >= self.warmup and (self._done - self.warmup) % self.every == 0:
            self.samples.append((self._done, sum(rss_bytes(pid) for pid in process_tree(self.pid))))
            if self.traced:
                os.kill(self.pid, signal.SIGUSR1)


def check_answer(status: int, payload: bytes, streaming: bool, expected: str) -> str:
    """'ok', 'error-reported' (a clean HTTP error or SSE error event), or 'corrupted'."""
    if status != 200:
        try:
            return "error-reported" if "error" in msgspec.json.decode(payload) else "corrupted"
        except msgspec.DecodeError:
            return "corrupted"
    if not payload:
        return "corrupted"
    if not streaming:
        choice = msgspec.json.decode(payload)["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        return "ok" if text == expected else "corrupted"
    text = ""
    for event in payload.split(b"\n\n"):
        if not event:
            continue
        data = event.removeprefix(b"data: ")
        if data == b"[DONE]":
            return "ok" if text == expected else "corrupted"
        message = msgspec.json.decode(data)
        if "error" in message:
            return "error-reported" if expected.startswith(text) else "corrupted"
        choice = message["choices"][0]
        text += choice["delta"].get("content", "") if "delta" in choice else choice["text"]
    return "corrupted"  # a 200 stream that just stops: the failure the proxy must never produce


async def one_request(session, url: str, rng: random.Random, disconnect_rate: float, outcomes: Counter) -> None:
    chat = rng.random() < 0.5
    streaming = rng.random() < 0.7
    prompt = " ".join(f"word{rng.randrange(1000)}" for _ in range(rng.randrange(1, 40)))
    max_tokens = rng.randrange(1, 33)
    if chat:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update(model="fake-model", max_tokens=max_tokens, stream=streaming)
    expected = "".join(fake_tokens(prompt, max_tokens))

    async def call():
        async with session.post(url + path, data=msgspec.json.encode(body)) as answer:
            return answer.status, await answer.read()

    task = asyncio.ensure_future(call())
    if rng.random() < disconnect_rate:
        await asyncio.sleep(rng.uniform(0, 0.03))
        task.cancel()
    try:
        status, payload = await task
    except asyncio.CancelledError:
        outcomes["client-disconnected"] += 1
        return
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        outcomes["lost"] += 1  # the proxy dropped the connection without an answer, or never answered
        outcomes[f"lost-{type(exc).__name__}"] += 1
        return
    outcomes[check_answer(status, payload, streaming, expected)] += 1
    if status != 200:
        outcomes[f"http-{status}"] += 1


async def chaos(engines: list[FakeEngine], rng: random.Random, interval: float, stop: asyncio.Event,
                kills: Counter) -> None:
    """Kill a random engine now and then and restart it a little later, keeping one of each role alive."""
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(0.5, 1.5) * interval)
        victim = rng.choice(engines)
        if sum(e.role == victim.role and e._runner is not None for e in engines) < 2:
            continue
        await victim.stop()
        kills[victim.role] += 1
        await asyncio.sleep(rng.uniform(0.2, 1.0) * interval)
        await victim.start()


async def soak(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    behaviour = Behaviour(prefill_delay=0.002, token_delay=0.001, fail_rate=args.fail_rate)
    engines = [await FakeEngine(role, kv_port=0, behaviour=behaviour, seed=i).start()
               for i, role in enumerate(["prefill"] * args.prefills + ["decode"] * args.decodes)]
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="soak-proxy-")
    deployment = Path(workdir) / "deployment.yaml"
    deployment.write_text(deployment_yaml(engines, args.mode, port))
    environ = dict(os.environ)
    if args.tracemalloc:
        environ[TRACEMALLOC_ENV] = args.tracemalloc
    proxy = subprocess.Popen([sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--deployment", str(deployment),
                              "--host", "127.0.0.1", "--log-level", "error", "--health-interval", "0.5",
                              "--read-timeout", "10", "--total-timeout", "30", "--public-detail",
                              "--event-loop", args.proxy_event_loop, "--workers", str(args.workers)],
                             stderr=subprocess.DEVNULL, env=environ)
    url = f"http://127.0.0.1:{port}"
    outcomes: Counter = Counter()
    kills: Counter = Counter()
    memory = MemorySampler(proxy.pid, args.warmup, args.sample_every, bool(args.tracemalloc))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=60)) as session:
            await wait_healthy(session, url)
            stop = asyncio.Event()
            chaos_task = asyncio.ensure_future(chaos(engines, rng, args.kill_interval, stop, kills))
            started = time.perf_counter()
            remaining = iter(range(args.requests))

            async def worker():
                for _ in remaining:
                    await one_request(session, url, rng, args.disconnect_rate, outcomes)
                    memory.request_done()

            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            elapsed = time.perf_counter() - started
            stop.set()
            await chaos_task
            for engine in engines:
                if engine._runner is None:
                    await engine.start()
            await asyncio.sleep(1.0)  # let handoffs of walked-away clients finish
            async with session.get(url + "/metrics") as answer:  # every worker's, merged
                held = held_load(await answer.text())
    finally:
        proxy.terminate()
        proxy.wait(10)
        for engine in engines:
            await engine.stop()
    return report(args, outcomes, kills, memory, held, engines, elapsed)


def held_load(exposition: str) -> dict[str, float]:
    """Load the proxy still holds, from its /metrics: per backend tokens and requests, and requests in flight."""
    held = {}
    for family in text_string_to_metric_families(exposition):
        if family.name in ("ascend_pd_proxy_backend_load_tokens", "ascend_pd_proxy_backend_inflight",
                           "ascend_pd_proxy_inflight"):
            for sample in family.samples:
                if sample.value:
                    held[f"{sample.name}{{{sample.labels.get('backend', '')}}}"] = sample.value
    return held


def report(args, outcomes, kills, memory, held, engines, elapsed) -> int:
    answered = sum(outcomes[k] for k in ("ok", "error-reported", "corrupted", "lost"))
    print(f"{args.requests} requests in {elapsed:.1f} s ({args.requests / elapsed:.0f} req/s), {args.mode} flow, "
          f"{args.prefills} P + {args.decodes} D, concurrency {args.concurrency}, {args.workers} proxy worker(s)")
    print(f"backend kills: {dict(kills)}; injected engine failure rate {args.fail_rate:.0%}")
    print(f"outcomes: ok {outcomes['ok']}, clean errors {outcomes['error-reported']}, "
          f"client disconnects {outcomes['client-disconnected']}, LOST {outcomes['lost']}, "
          f"CORRUPTED {outcomes['corrupted']}  (of {answered} answered)")
    print("error statuses:", {k: v for k, v in sorted(outcomes.items()) if k.startswith("http-")})
    if outcomes["lost"]:
        print("lost answers by client exception:", {k: v for k, v in sorted(outcomes.items()) if k.startswith("lost-")})
    print(f"load still held by the proxy after the run: {held or 'none'}")
    print(f"stale KV reads at D (replayed handoffs): {sum(e.stale_reads for e in engines)}; "
          f"KV reads failed because P restarted after its prefill: {sum(e.lost_kv_reads for e in engines)}; "
          f"decode recomputes: {sum(e.recomputes for e in engines)}")
    report_memory(args, memory)
    bad = outcomes["lost"] + outcomes["corrupted"] + len(held)
    print("RESULT:", "PASS" if bad == 0 else "FAIL")
    return 0 if bad == 0 else 1


def report_memory(args, memory: MemorySampler) -> None:
    samples = memory.samples
    if len(samples) < 2:
        print(f"proxy RSS: too few samples after a warm-up of {args.warmup} requests")
        return
    print(f"proxy RSS MiB after a warm-up of {args.warmup} requests, every {args.sample_every}: " +
          ", ".join(f"{i}: {r / 2**20:.2f}" for i, r in samples))
    half = len(samples) // 2
    first, second = samples[:half], samples[half:]
    print(f"RSS slope after warm-up: {slope_per_1000(samples) / 1024:+.1f} KiB per 1,000 requests, over the second "
          f"half {slope_per_1000(second) / 1024:+.1f} KiB; "
          f"first {samples[0][1] / 2**20:.2f} MiB, last {samples[-1][1] / 2**20:.2f} MiB, mean of the second half "
          f"{(mean_rss(second) - mean_rss(first)) / 1024:+.0f} KiB against the first")
    if args.tracemalloc:
        report_tracemalloc(Path(args.tracemalloc), memory.pid)


def mean_rss(samples: list[tuple[int, int]]) -> float:
    return sum(r for _, r in samples) / len(samples)


def report_tracemalloc(directory: Path, pid: int) -> None:
    import tracemalloc

    snapshots = sorted(directory.glob(f"proxy-{pid}-*.tracemalloc"))
    if len(snapshots) < 2:
        print(f"tracemalloc: fewer than two snapshots in {directory}")
        return
    first, last = (tracemalloc.Snapshot.load(str(path)) for path in (snapshots[0], snapshots[-1]))
    print(f"tracemalloc, {snapshots[0].name} -> {snapshots[-1].name}: traced {traced_mib(first):.2f} -> "
          f"{traced_mib(last):.2f} MiB; lines that grew most:")
    for stat in last.compare_to(first, "lineno")[:10]:
        print(f"  {stat.size_diff / 1024:+8.1f} KiB {stat.count_diff:+6d} blocks  {stat.traceback[0]}")


def traced_mib(snapshot) -> float:
    return sum(stat.size for stat in snapshot.statistics("filename")) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--mode", choices=sorted(CONNECTORS), default="pull")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--prefills", type=int, default=3)
    parser.add_argument("--decodes", type=int, default=3)
    parser.add_argument("--kill-interval", type=float, default=2.0, help="mean seconds between backend kills")
    parser.add_argument("--disconnect-rate", type=float, default=0.05, help="fraction of clients that walk away")
    parser.add_argument("--fail-rate", type=float, default=0.01, help="fraction of engine calls answered 500")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2000, help="requests before the first RSS sample")
    parser.add_argument("--sample-every", type=int, default=1000, help="requests between two RSS samples")
    parser.add_argument("--tracemalloc", metavar="DIR", default=None,
                        help="trace the proxy's allocations and diff snapshots taken at the RSS samples")
    parser.add_argument("--proxy-event-loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    parser.add_argument("--workers", type=int, default=1, help="proxy worker processes (RSS is their sum)")
    args = parser.parse_args()
    # engines are killed in the middle of requests on purpose; aiohttp logs each handler it interrupts
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    sys.exit(asyncio.run(soak(args)))


if __name__ == "__main__":
    main()
