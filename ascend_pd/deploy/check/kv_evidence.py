"""Whether the canary's prompt KV reached D from P, read from every decode rank's /metrics before and after it.

Two sources, by connector:
- vLLM's own `vllm:external_prefix_cache_hits`: prompt tokens D's scheduler took as loadable from outside, counted
  when D schedules the load (before a byte moves), whatever the connector;
- this project's connector (connector/stats_prometheus.py) counts what really moved: per request its prompt KV
  bytes (`vllm:ascend_pd_kv_request_bytes`, a histogram whose count is the transfers completed) and the loads that
  failed and were recomputed (`vllm:ascend_pd_kv_failures`).
vllm-ascend's Mooncake connectors export no metrics of their own (docs/vllm-ascend.md), so with them only the first
can be seen."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from ascend_pd.deploy import connector_metrics
from ascend_pd.deploy.check.prometheus_text import sample_sum
from ascend_pd.deploy.check.report import Finding
from ascend_pd.deploy.http_calls import Unreachable, call

EXTERNAL_TOKENS = "vllm:external_prefix_cache_hits_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
# the samples of the connector's metrics (deploy/connector_metrics.py) as a Prometheus page names them
KV_TRANSFERS = f"{connector_metrics.KV_REQUEST_BYTES}_count"
KV_BYTES = f"{connector_metrics.KV_REQUEST_BYTES}_sum"
KV_FAILURES = f"{connector_metrics.KV_FAILURES}_total"
READ = {"external_tokens": EXTERNAL_TOKENS, "prompt_tokens": PROMPT_TOKENS, "kv_transfers": KV_TRANSFERS,
        "kv_bytes": KV_BYTES, "kv_failures": KV_FAILURES}
POLL_SECONDS = 0.5
MAX_READS_AT_ONCE = 32

Reading = dict[str, float | None]  # figure -> the counter's value (None: not on the page)


def read_decode(url: str, timeout: float) -> Reading | None:
    """The counters on one decode rank's /metrics; None when it does not answer."""
    try:
        answer = call(url + "/metrics", timeout)
    except Unreachable:
        return None
    if answer.status != 200:
        return None
    page = answer.text()
    return {figure: sample_sum(page, name) for figure, name in READ.items()}


def read_decodes(decodes: dict[str, str], timeout: float) -> dict[str, Reading | None]:
    """Every decode rank's counters (name -> URL), read at once: a rank that stopped answering costs `timeout`
    once, not once per rank."""
    if not decodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(MAX_READS_AT_ONCE, len(decodes))) as pool:
        return dict(zip(decodes, pool.map(lambda url: read_decode(url, timeout), decodes.values())))


def _moved(before: Reading, after: Reading) -> dict[str, float]:
    """How far each counter moved between the readings. One missing before and present after was 0: a labelled
    series (the connector's per-mode histograms) appears with its first observation."""
    return {figure: after[figure] - (before.get(figure) or 0.0) for figure in READ if after.get(figure) is not None}


def judge(before: dict[str, Reading | None], after: dict[str, Reading | None], ascend_pd_connector: bool) -> Finding:
    """The evidence over every decode rank read both times (name -> reading)."""
    moved = {name: _moved(before[name], after[name]) for name in before
             if before[name] is not None and after.get(name) is not None}
    if not moved:
        return Finding("failed", "no decode engine answered /metrics before and after the canary")
    figures = {name: {figure: round(value) for figure, value in delta.items()} for name, delta in moved.items()}
    if ascend_pd_connector:
        return _judge_ascend_pd(moved, after, figures)
    took = [name for name, delta in moved.items() if delta.get("external_tokens", 0) > 0]
    if not took:
        return Finding("failed", "no decode engine took prompt tokens from outside for the canary: D computed its "
                                 "prompt itself", figures)
    return Finding("ok", "; ".join(f"{name}: {moved[name]['external_tokens']:g} prompt tokens scheduled to load from "
                                   f"P" for name in took)
                   + " (vllm-ascend's connector exports no transfer metrics: bytes and failed loads cannot be seen)",
                   figures)


def _judge_ascend_pd(moved: dict[str, dict[str, float]], after: dict[str, Reading | None],
                     figures: dict) -> Finding:
    failed = {name: delta["kv_failures"] for name, delta in moved.items() if delta.get("kv_failures", 0) > 0}
    if failed:
        return Finding("failed", "; ".join(f"{name} failed {count:g} KV load(s) and recomputed the prompt"
                                           for name, count in failed.items()), figures)
    if all(after[name].get("kv_failures") is None for name in moved):  # a series the connector serves from start
        return Finding("failed", "no decode engine serves vllm:ascend_pd_* metrics: is AscendPDConnector its KV "
                                 "connector?", figures)
    took = [name for name, delta in moved.items()
            if delta.get("kv_transfers", 0) >= 1 and delta.get("kv_bytes", 0) > 0]
    if not took:
        return Finding("failed", "no decode engine received KV for the canary: D computed its prompt itself",
                       figures)
    return Finding("ok", "; ".join(f"{name}: {moved[name].get('external_tokens', 0):g} prompt tokens from P, "
                                   f"{_size(moved[name]['kv_bytes'])} in {moved[name]['kv_transfers']:g} "
                                   f"transfer(s), no failed load" for name in took), figures)


def _size(count: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:g} B"


def await_evidence(decodes: dict[str, str], before: dict[str, Reading | None], ascend_pd_connector: bool,
                   timeout: float, wait: float) -> Finding:
    """Read the decode ranks (name -> URL) until the evidence holds or `wait` seconds pass: vLLM publishes an
    engine's counters on its next stats update, not with the answer."""
    deadline = time.monotonic() + wait
    while True:
        after = read_decodes(decodes, timeout)
        finding = judge(before, after, ascend_pd_connector)
        if finding.ok or time.monotonic() >= deadline:
            return finding
        time.sleep(POLL_SECONDS)
