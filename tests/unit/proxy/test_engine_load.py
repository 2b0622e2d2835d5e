"""Engine load: vLLM's /metrics page parsed (several engine cores, the old KV gauge name), routing load as own tokens
plus other proxies' requests valued at the mean prompt, stale readings ignored, and the policies using it."""

import copy
import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ascend_pd.proxy.backends import FALLBACK_PROMPT_TOKENS, BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.engine_load import parse_engine_load
from ascend_pd.proxy.metrics import ProxyMetrics
from ascend_pd.proxy.policies import RouteRequest
from ascend_pd.proxy.policies.least_loaded import LeastLoaded
from ascend_pd.proxy.policies.prefix_affinity import PrefixAffinity
from ascend_pd.proxy.prefix_index import PrefixIndex
from ascend_pd.proxy.siblings import SharedLoad

LABELS = ["model_name", "engine"]  # what vLLM's PrometheusStatLogger labels every per-engine series with


def vllm_page(running: dict[int, int], waiting: dict[int, int], kv: dict[int, float],
              kv_name: str = "vllm:kv_cache_usage_perc") -> str:
    """A /metrics page shaped like vLLM 0.32's: the scheduler gauges per engine core, next to series with similar
    names and the histograms and counters that make up most of a real page."""
    registry = CollectorRegistry()
    gauges = {name: Gauge(name, "doc", LABELS, registry=registry)
              for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", kv_name)}
    by_reason = Gauge("vllm:num_requests_waiting_by_reason", "doc", LABELS + ["reason"], registry=registry)
    latency = Histogram("vllm:e2e_request_latency_seconds", "doc", LABELS, registry=registry)
    prompts = Counter("vllm:prompt_tokens", "doc", LABELS, registry=registry)
    for engine in running:
        labels = ("tiny", str(engine))
        gauges["vllm:num_requests_running"].labels(*labels).set(running[engine])
        gauges["vllm:num_requests_waiting"].labels(*labels).set(waiting[engine])
        gauges[kv_name].labels(*labels).set(kv[engine])
        by_reason.labels(*labels, "capacity").set(100)  # must not count as waiting a second time
        latency.labels(*labels).observe(0.5)
        prompts.labels(*labels).inc(1000)
    return generate_latest(registry).decode()


def test_requests_are_summed_over_engine_cores_and_kv_usage_is_the_fullest_core():
    load = parse_engine_load(vllm_page(running={0: 3, 1: 5}, waiting={0: 2, 1: 0}, kv={0: 0.25, 1: 0.75}))
    assert (load.requests, load.kv_usage) == (10, 0.75)


def test_the_kv_gauge_of_older_vllm_releases_is_read_too():
    page = vllm_page(running={0: 1}, waiting={0: 4}, kv={0: 0.5}, kv_name="vllm:gpu_cache_usage_perc")
    load = parse_engine_load(page)
    assert (load.requests, load.kv_usage) == (5, 0.5)


def test_a_page_without_the_scheduler_gauges_is_not_an_engine_load():
    proxy_page = ProxyMetrics(BackendPool(lambda: CircuitBreaker(3, 10))).exposition().decode()
    with pytest.raises(ValueError, match="vllm:num_requests_running"):
        parse_engine_load(proxy_page)


def decode_pool(count: int = 2) -> BackendPool:
    pool = BackendPool(lambda: CircuitBreaker(3, 10))
    for index in range(count):
        pool.add(Endpoint(f"http://10.0.0.{index}:8000", "decode", f"d{index}"))
    return pool


def test_routing_load_is_own_tokens_plus_foreign_requests_at_the_mean_prompt():
    pool = decode_pool()
    mine, other = pool.by_role("decode")
    mine.lease(100)
    mine.lease(300)  # the role's mean prompt is now 200 tokens
    mine.read_engine(requests=3, kv_usage=0.1, fresh_for=3.0, now=50.0)  # 2 of the 3 are this proxy's
    other.read_engine(requests=5, kv_usage=0.4, fresh_for=3.0, now=50.0)  # none of the 5 is
    assert mine.routing_load(now=51.0) == 400 + 1 * 200
    assert other.routing_load(now=51.0) == 5 * 200
    assert other.routing_requests(now=51.0) == 5


def test_foreign_requests_count_against_own_requests_at_the_reading_not_now():
    pool = decode_pool(1)
    backend = pool.by_role("decode")[0]
    first, second = backend.lease(50), backend.lease(50)
    backend.read_engine(requests=3, kv_usage=0.0, fresh_for=3.0, now=10.0)
    second.release()  # finished after the reading: the engine's 3 still hold 1 of another proxy, not 2
    assert backend.foreign_requests(now=11.0) == 1
    assert backend.routing_load(now=11.0) == 50 + 1 * 50
    first.release()


def test_an_engine_that_has_not_yet_seen_this_proxys_requests_has_no_negative_foreign_load():
    backend = decode_pool(1).by_role("decode")[0]
    backend.lease(80)
    backend.lease(80)
    backend.read_engine(requests=1, kv_usage=0.0, fresh_for=3.0, now=0.0)
    assert backend.foreign_requests(now=0.5) == 0 and backend.routing_load(now=0.5) == 160


def test_a_reading_older_than_its_freshness_is_ignored():
    backend = decode_pool(1).by_role("decode")[0]
    backend.read_engine(requests=4, kv_usage=0.9, fresh_for=3.0, now=100.0)
    assert backend.foreign_requests(now=103.0) == 4
    assert backend.foreign_requests(now=103.01) == 0 and backend.routing_load(now=103.01) == 0


def test_before_any_request_foreign_requests_are_worth_the_fallback_and_keep_their_order():
    light, heavy = decode_pool().by_role("decode")
    light.read_engine(requests=1, kv_usage=0.0, fresh_for=60.0)
    heavy.read_engine(requests=2, kv_usage=0.0, fresh_for=60.0)
    assert light.routing_load() == FALLBACK_PROMPT_TOKENS
    picks = {LeastLoaded(random.Random(seed)).choose([heavy, light], RouteRequest("p", 10)).url for seed in range(20)}
    assert picks == {light.url}


def test_the_mean_prompt_is_per_role_so_an_unused_backend_values_foreign_requests_too():
    pool = BackendPool(lambda: CircuitBreaker(3, 10))
    used = pool.add(Endpoint("http://10.0.0.1:8000", "decode", "d1"))
    unused = pool.add(Endpoint("http://10.0.0.2:8000", "decode", "d2"))
    prefill = pool.add(Endpoint("http://10.0.0.3:8000", "prefill", "p3"))
    used.lease(1000)
    unused.read_engine(requests=2, kv_usage=0.0, fresh_for=60.0)
    prefill.read_engine(requests=2, kv_usage=0.0, fresh_for=60.0)
    assert unused.routing_load() == 2000
    assert prefill.routing_load() == 2 * FALLBACK_PROMPT_TOKENS


def test_with_worker_processes_own_load_is_the_whole_proxys_and_a_siblings_requests_are_not_foreign():
    shared = SharedLoad(workers=2)
    sibling_view = copy.copy(shared)  # the other worker's view of the same shared memory, as after the fork
    sibling_view.worker = 1
    endpoint = Endpoint("http://10.0.0.1:8000", "decode", "d1")
    mine = BackendPool(lambda: CircuitBreaker(3, 10), shared).add(endpoint)
    siblings = BackendPool(lambda: CircuitBreaker(3, 10), sibling_view).add(endpoint)
    siblings.lease(300)
    mine.lease(100)
    assert (mine.own_tokens(), mine.own_requests()) == (400, 2)
    assert (mine.load_tokens, mine.inflight) == (100, 1)  # this worker's alone, as its /metrics shows
    mine.read_engine(requests=3, kv_usage=0.0, fresh_for=60.0)
    assert mine.foreign_requests() == 1


def test_least_loaded_avoids_the_backend_other_proxies_fill():
    pool = decode_pool()
    mine, busy = pool.by_role("decode")
    mine.lease(100)  # this proxy alone would now pick `busy`, which it sees idle
    busy.read_engine(requests=3, kv_usage=0.5, fresh_for=60.0)
    policy = LeastLoaded()
    assert {policy.choose([mine, busy], RouteRequest("p", 100)).url for _ in range(10)} == {mine.url}


def test_least_loaded_ties_still_rotate_between_equally_loaded_backends():
    first, second = decode_pool().by_role("decode")
    for backend in (first, second):
        backend.read_engine(requests=2, kv_usage=0.0, fresh_for=60.0)
    policy = LeastLoaded()
    assert {policy.choose([first, second], RouteRequest("p", 10)).url for _ in range(4)} == {first.url, second.url}


def test_prefix_affinity_leaves_its_backend_when_other_proxies_overload_it():
    pool = decode_pool()
    policy = PrefixAffinity(PrefixIndex(block_chars=16), balance_tokens=1000)
    system = "You are a helpful assistant. " * 4
    owner = policy.choose(pool.all(), RouteRequest(system + "one", 500))
    owner.lease(500)
    assert policy.choose(pool.all(), RouteRequest(system + "two", 500)) is owner  # 500 over the lightest: kept
    owner.read_engine(requests=1 + 3, kv_usage=0.0, fresh_for=60.0)  # 3 foreign requests of ~500 tokens
    assert policy.choose(pool.all(), RouteRequest(system + "three", 500)) is not owner


def test_describe_shows_the_engine_reading():
    backend = decode_pool(1).by_role("decode")[0]
    assert backend.describe()["engine"] is None
    backend.read_engine(requests=7, kv_usage=0.3, fresh_for=3.0)
    shown = backend.describe()
    assert shown["engine"]["requests"] == 7 and shown["engine"]["kv_usage"] == 0.3
    assert shown["routing_load"] == 7 * FALLBACK_PROMPT_TOKENS
