"""Whether a prefill engine still holds prompt KV that a decode instance has yet to read (pull) or that it is still
sending (push), read from the engine's own /metrics: stopping it before then fails those handoffs. The gauge is the
connector's `vllm:ascend_pd_kv_held_requests` (connector/stats_prometheus.py), read over HTTP only: this layer does
not import the connector."""

from __future__ import annotations

import json
import math
import re
import time

from prometheus_client.parser import text_string_to_metric_families

from ascend_pd.autoscale.proxy_admin import CALL_TIMEOUT, POLL_SECONDS, StepFailed
from ascend_pd.deploy.connector_metrics import KV_HELD_REQUESTS
from ascend_pd.deploy.http_calls import Unreachable, call

GAUGE = KV_HELD_REQUESTS
# The gauge follows the connector's count on every step only where vLLM collects the scheduler side's stats after
# update_connector_output on every step (vLLM PR 43877, read in 0.32.0's v1/core/sched/scheduler.py). Before, it
# could read 0 while KV is held, so an older engine is given its hold limit instead, as one without the gauge.
TRUSTED_FROM = (0, 32)
# Only the gauge's lines go to the parser, as the proxy reads the engines' load (proxy/engine_load.py): the name must
# end where the line's name ends, so a look-alike (`..._requests_by_reason`) is not it.
_WANTED_LINES = tuple(f"{prefix}{GAUGE}{end}" for prefix, end in (("", "{"), ("", " "), ("# HELP ", " "),
                                                                   ("# TYPE ", " ")))


def _get(url: str, timeout: float) -> str:
    """The body at `url`, all of it within `timeout`; StepFailed when there is none or the status is not 2xx."""
    try:
        answer = call(url, timeout)
    except Unreachable as exc:
        raise StepFailed(f"GET {url}: {exc}") from None
    if not 200 <= answer.status < 300:
        raise StepFailed(f"GET {url} answered {answer.status}")
    return answer.text()


def _trusted(url: str, timeout: float) -> bool:
    """Whether the engine's vLLM (GET /version) keeps the gauge current; StepFailed when it does not answer."""
    try:
        version = json.loads(_get(url.rstrip("/") + "/version", timeout)).get("version", "")
    except StepFailed as exc:
        if " answered " in str(exc):  # no /version: a version that cannot say
            return False
        raise
    except (ValueError, AttributeError):
        return False
    numbers = tuple(int(part) for part in re.findall(r"\d+", str(version))[:2])
    return len(numbers) == 2 and numbers >= TRUSTED_FROM


def held_requests(url: str, timeout: float) -> int | None:
    """Requests whose KV the engine at `url` holds, summed over its series (one per engine core behind the API
    server); None when its /metrics has no such gauge (another connector) or its vLLM does not keep it current.
    StepFailed when it does not answer."""
    page = _get(url.rstrip("/") + "/metrics", timeout)
    wanted = "\n".join(line for line in page.splitlines() if line.startswith(_WANTED_LINES))
    try:
        families = [family for family in text_string_to_metric_families(wanted) if family.name == GAUGE]
    except ValueError:  # a gauge line that does not parse says nothing: the engine is given its hold limit
        return None
    total = sum(s.value for family in families for s in family.samples if math.isfinite(s.value))
    return round(total) if families and _trusted(url, timeout) else None


def wait_kv_released(urls: list[str], seconds: float, hold_timeout: float) -> str:
    """Until no engine at `urls` holds KV for a decode instance, polled every POLL_SECONDS; StepFailed naming the
    engines and their counts after `seconds`, or at once naming one that does not answer. An engine without the
    gauge cannot say: it is given `hold_timeout`, the connector's own limit after which it frees the blocks anyway.
    Returns what was waited for."""
    started = time.monotonic()
    call_timeout = min(CALL_TIMEOUT, max(seconds, 1.0))  # a zero timeout would make the socket non-blocking
    counted = list(urls)
    blind: list[str] = []
    while True:
        held = {}
        for url in list(counted):
            count = held_requests(url, call_timeout)
            if count is None:
                counted.remove(url)
                blind.append(url)
            elif count:
                held[url] = count
        if not held:
            break
        if time.monotonic() - started > seconds:
            raise StepFailed(f"KV still held for decode after {seconds:g} s: "
                             + ", ".join(f"{url} holds {n} request(s)" for url, n in held.items()))
        time.sleep(POLL_SECONDS)
    said = [f"held KV released on {', '.join(counted)} after {time.monotonic() - started:.1f} s"] if counted else []
    if blind:
        time.sleep(max(0.0, started + hold_timeout - time.monotonic()))
        said.append(f"no {GAUGE} gauge on {', '.join(blind)}: waited its hold limit of {hold_timeout:g} s")
    return "; ".join(said) or "no engine to wait for"
