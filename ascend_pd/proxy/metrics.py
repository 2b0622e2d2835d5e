"""Prometheus metrics of one proxy: request outcomes, retries, phase latencies, and backend state at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from ascend_pd.proxy.backends import BackendPool

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = (16, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2)


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
        self.prompt_tokens = Histogram("ascend_pd_proxy_prompt_tokens", "prompt tokens per request (as counted "
                                       "for routing)", registry=r, buckets=TOKEN_BUCKETS)
        self.output_tokens = Histogram("ascend_pd_proxy_output_tokens", "output tokens per answered request",
                                       registry=r, buckets=TOKEN_BUCKETS)
        self.time_per_output_token = Histogram("ascend_pd_proxy_time_per_output_token_seconds",
                                               "TPOT of streamed answers at the proxy: first to last token over the "
                                               "tokens after the first", registry=r, buckets=TPOT_BUCKETS)
        r.register(_BackendCollector(pool))
        self.request_outcome = LabelledChildren(self.requests)
        self.routed_to = LabelledChildren(self.routed)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


# gauges that describe a backend as each worker sees it: the host's view is the largest, not the sum
MAX_ACROSS_WORKERS = {"ascend_pd_proxy_backend_up"}


class _Merged:
    def __init__(self, families: list[Metric]):
        self._families = families

    def collect(self):
        return self._families


def _combination(family: str):
    if family.endswith("_created"):  # when a series began: the earliest worker's
        return min
    return max if family in MAX_ACROSS_WORKERS else float.__add__


def merge_expositions(texts: list[bytes]) -> bytes:
    """The /metrics of several worker processes as one proxy's: counters, histograms and load gauges summed,
    per-backend state gauges (MAX_ACROSS_WORKERS) at their largest, creation times at their earliest."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple, float]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            by_sample = values.setdefault(family.name, {})
            combine = _combination(family.name)
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                by_sample[key] = combine(by_sample[key], sample.value) if key in by_sample else sample.value
    for name, merged in families.items():
        for (sample_name, labels), value in values[name].items():
            merged.add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry()
    registry.register(_Merged(list(families.values())))
    return generate_latest(registry)
