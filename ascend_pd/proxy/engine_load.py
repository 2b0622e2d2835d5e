"""Engine load read from vLLM's Prometheus /metrics (requests running and waiting, KV cache usage), polled per
backend, so proxy replicas in front of the same engines see each other's load without talking to each other."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ascend_pd.proxy.backends import Backend, BackendPool

log = logging.getLogger("ascend_pd.proxy.engine_load")

# vLLM's scheduler gauges, one sample per engine core (label `engine`, the DP rank) and `model_name`; see
# docs/vllm-ascend.md, "Engine load metrics the proxy reads"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"
OLD_KV_USAGE = "vllm:gpu_cache_usage_perc"  # the same gauge before vLLM renamed it; gone from current releases
FRESH_INTERVALS = 3  # a reading older than this many poll intervals no longer counts in routing

# A vLLM /metrics page is mostly histograms (hundreds of lines per engine core): only the lines of these gauges go to
# the parser, which keeps a poll cheap. The name must end where the line's name ends (`_waiting_by_reason` is not
# `_waiting`).
_WANTED_LINES = tuple(f"{prefix}{name}{end}" for name in (RUNNING, WAITING, KV_USAGE, OLD_KV_USAGE)
                      for prefix, end in (("", "{"), ("", " "), ("# HELP ", " "), ("# TYPE ", " ")))


@dataclass(frozen=True)
class EngineLoad:
    requests: int  # running + waiting, summed over the engine cores
    kv_usage: float  # 0..1, the fullest engine core


def parse_engine_load(text: str) -> EngineLoad:
    """The load in a vLLM /metrics page; ValueError when the page has no vLLM scheduler gauges."""
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(_WANTED_LINES))
    requests = 0.0
    kv_usage = 0.0
    seen: set[str] = set()
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            seen.add(sample.name)
            if sample.name in (RUNNING, WAITING):
                requests += sample.value
            else:  # the old and the new KV gauge: during vLLM's deprecation window both are there, alike
                kv_usage = max(kv_usage, sample.value)
    missing = sorted({RUNNING, WAITING} - seen)
    if missing:
        raise ValueError(f"no {' or '.join(missing)} in it")
    return EngineLoad(round(requests), kv_usage)


async def read_engine_load(session: aiohttp.ClientSession, backend: Backend, timeout: float, fresh_for: float,
                           failing: set[str]) -> None:
    """GET the backend's /metrics and record its load on the backend; never raises. A failure leaves the backend
    without a fresh reading, and is logged when the backend starts failing (in `failing`) and when it recovers."""
    try:
        async with session.get(backend.url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status}")
            load = parse_engine_load(await response.text())
    except asyncio.TimeoutError:
        problem = f"no answer within {timeout:g} s"
    except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a bad status or a page that is no vLLM engine's
        problem = str(exc) or type(exc).__name__
    else:
        backend.read_engine(load.requests, load.kv_usage, fresh_for)
        if backend.url in failing:
            failing.discard(backend.url)
            log.info("%s backend %s: engine load readable again", backend.role, backend.url)
        return
    if backend.url not in failing:
        failing.add(backend.url)
        log.warning("%s backend %s: cannot read the engine's load from /metrics (%s); routing there counts only this "
                    "proxy's own requests until it can", backend.role, backend.url, problem)


async def poll_engine_load_forever(session: aiohttp.ClientSession, pool: BackendPool, interval: float,
                                   timeout: float) -> None:
    """Every `interval` seconds read every backend's /metrics, concurrently, each read bounded by `timeout`. A
    backend whose previous read is still running is skipped this round rather than read twice."""
    reads: dict[Backend, asyncio.Task] = {}
    failing: set[str] = set()
    try:
        while True:
            reads = {backend: task for backend, task in reads.items() if not task.done()}
            for backend in pool.all():
                if backend not in reads:
                    reads[backend] = asyncio.create_task(
                        read_engine_load(session, backend, timeout, FRESH_INTERVALS * interval, failing))
            await asyncio.sleep(interval)
    finally:
        for task in reads.values():
            task.cancel()
