"""How many proxy worker processes a plan needs. A streamed answer costs the proxy a fixed part per request (the P
and D calls, routing, the client's request and answer head) and a part per SSE event it relays, one per decode step
(vLLM sends each step's tokens, all MTP-accepted ones included, as one event). At SuperPoD rates the events dominate:
337 req/s of 1,000-token answers is 337,000 events a second."""

from __future__ import annotations

import math

from ascend_pd.defaults import PROXY_CORE_UTILISATION, PROXY_CPU_PER_EVENT_S, PROXY_CPU_PER_REQUEST_S


def proxy_cores(rate: float, mean_output_tokens: float, tokens_per_step: float = 1.0) -> float:
    """Cores of proxy CPU the stream of requests keeps busy."""
    events = mean_output_tokens / max(tokens_per_step, 1.0)
    return rate * (PROXY_CPU_PER_REQUEST_S + events * PROXY_CPU_PER_EVENT_S)


def proxy_workers(rate: float, mean_output_tokens: float, tokens_per_step: float = 1.0) -> int:
    """Worker processes that carry `rate` with each core at most PROXY_CORE_UTILISATION busy."""
    return max(1, math.ceil(proxy_cores(rate, mean_output_tokens, tokens_per_step) / PROXY_CORE_UTILISATION))
