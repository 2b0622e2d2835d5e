"""Prometheus metrics of one proxy: request outcomes, retries, phase latencies, and backend state at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ascend_pd.proxy.backends import BackendPool

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _BackendCollector:
    """Backend gauges read from the pool when scraped, so they are never stale and cost nothing per request."""

    def __init__(self, pool: BackendPool):
        self._pool = pool

    def collect(self):
        up = GaugeMetricFamily("ascend_pd_proxy_backend_up", "1 if the backend takes new requests",
                               labels=["role", "backend", "url"])
        load = GaugeMetricFamily("ascend_pd_proxy_backend_load_tokens", "prompt tokens of requests in flight",
                                 labels=["role", "backend", "url"])
        inflight = GaugeMetricFamily("ascend_pd_proxy_backend_inflight", "requests in flight",
                                     labels=["role", "backend", "url"])
        for backend in self._pool.all():
            labels = [backend.role, backend.endpoint.name, backend.url]
            up.add_metric(labels, 1.0 if backend.routable() else 0.0)
            load.add_metric(labels, backend.load_tokens)
            inflight.add_metric(labels, backend.inflight)
        yield from (up, load, inflight)


class LabelledChildren:
    """`metric.labels(*values)` remembered per label tuple: prometheus_client validates the labels and takes a lock
    on every labels() call, which is on the path of every request. Bounded by the label values that exist."""

    def __init__(self, metric):
        self._metric = metric
        self._children: dict[tuple[str, ...], object] = {}

    def __call__(self, *values: str):
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


class ProxyMetrics:
    def __init__(self, pool: BackendPool, inflight=lambda: 0):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("ascend_pd_proxy_requests", "client requests by endpoint and outcome",
                                ["endpoint", "outcome"], registry=r)
        # read when scraped, like the backend gauges: nothing to update per request
        self.inflight = Gauge("ascend_pd_proxy_inflight", "client requests in flight", registry=r)
        self.inflight.set_function(inflight)
        self.routed = Counter("ascend_pd_proxy_routing_decisions", "backends chosen by the policies",
                              ["role", "backend"], registry=r)
        self.backend_failures = Counter("ascend_pd_proxy_backend_failures", "failed calls to a backend",
                                        ["role", "backend"], registry=r)
        self.retries = Counter("ascend_pd_proxy_retries", "retries: 'prefill' on another P, 'pair' re-prefill",
                               ["kind"], registry=r)
        self.handoff_failures = Counter("ascend_pd_proxy_handoff_failures",
                                        "requests D failed after a KV handoff (retried with a fresh prefill, on "
                                        "another P where one is left)", ["prefill", "decode"], registry=r)
        self.prefill_without_kv = Counter("ascend_pd_proxy_prefill_without_kv_params",
                                          "pull: P answers without kv_transfer_params, by what the proxy did: "
                                          "'answered' (P's answer was the whole answer), 'recomputed' (D "
                                          "computed the prompt itself)", ["outcome"], registry=r)
        self.stream_errors = Counter("ascend_pd_proxy_stream_errors",
                                     "streams that failed after the first byte (sent as an SSE error event)",
                                     registry=r)
        self.prefill_seconds = Histogram("ascend_pd_proxy_prefill_seconds", "P call time, send to answer",
                                         registry=r, buckets=LATENCY_BUCKETS)
        self.first_token_seconds = Histogram("ascend_pd_proxy_first_token_seconds",
                                             "arrival to the first byte of the answer (TTFT at the proxy)",
                                             registry=r, buckets=LATENCY_BUCKETS)
        r.register(_BackendCollector(pool))
        self.request_outcome = LabelledChildren(self.requests)
        self.routed_to = LabelledChildren(self.routed)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
