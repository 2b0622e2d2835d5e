"""Metric children cached per label tuple, the in-flight gauge read at scrape time, and the pool's fast paths."""

from hypothesis import given
from hypothesis import strategies as st

from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.metrics import ProxyMetrics


def pool_of(*roles: str) -> BackendPool:
    pool = BackendPool(lambda: CircuitBreaker(1, 10))
    for index, role in enumerate(roles):
        pool.add(Endpoint(f"http://10.0.0.{index}:8000", role, f"{role}-{index}"))
    return pool


def test_cached_children_count_like_labels():
    metrics = ProxyMetrics(pool_of("decode"))
    metrics.request_outcome("/v1/completions", "200").inc()
    metrics.request_outcome("/v1/completions", "200").inc()
    metrics.request_outcome("/v1/completions", "502").inc()
    assert metrics.request_outcome("/v1/completions", "200") is metrics.request_outcome("/v1/completions", "200")
    text = metrics.exposition().decode()
    assert 'ascend_pd_proxy_requests_total{endpoint="/v1/completions",outcome="200"} 2.0' in text
    assert 'ascend_pd_proxy_requests_total{endpoint="/v1/completions",outcome="502"} 1.0' in text


def test_inflight_gauge_is_read_when_scraped():
    state = {"inflight": 3}
    metrics = ProxyMetrics(pool_of("decode"), inflight=lambda: state["inflight"])
    assert "ascend_pd_proxy_inflight 3.0" in metrics.exposition().decode()
    state["inflight"] = 0
    assert "ascend_pd_proxy_inflight 0.0" in metrics.exposition().decode()


def test_has_candidate_agrees_with_candidates():
    pool = pool_of("prefill", "decode", "decode")
    for role in ("prefill", "decode", "colocated"):
        assert pool.has_candidate(role) == bool(pool.candidates(role))
    pool.get("http://10.0.0.0:8000").breaker.record_failure()  # threshold 1: open
    assert not pool.has_candidate("prefill") and not pool.candidates("prefill")
    pool.get("http://10.0.0.1:8000").draining = True
    assert pool.has_candidate("decode") and [b.url for b in pool.candidates("decode")] == ["http://10.0.0.2:8000"]


def test_a_call_target_is_the_parsed_url_of_the_path_and_is_kept():
    from ascend_pd.proxy.upstream import target as call_target

    target = call_target("http://10.0.0.7:8100", "/v1/chat/completions")
    assert (target.host, target.port, target.path, target.host_header) == \
        ("10.0.0.7", 8100, "/v1/chat/completions", "10.0.0.7:8100")
    assert call_target("http://10.0.0.7:8100", "/v1/chat/completions") is target


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@given(st.lists(st.one_of(st.just("fail"), st.just("ok"), st.floats(min_value=0, max_value=30)), max_size=30))
def test_breaker_allows_requests_exactly_when_it_is_not_open(steps):
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, open_seconds=10, clock=clock)
    for step in steps:
        if step == "fail":
            breaker.record_failure()
        elif step == "ok":
            breaker.record_success()
        else:
            clock.now += step
        assert breaker.allows_requests() == (breaker.state != "open")
