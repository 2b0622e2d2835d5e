"""Worker processes of one proxy share their in-flight load through memory made before the fork, and their metrics
merge into one proxy's."""

import os

from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.metrics import ProxyMetrics, merge_expositions
from ascend_pd.proxy.siblings import SharedLoad


def in_child(work) -> None:
    """Run `work` in a forked child and wait for it; a failed assertion there fails the test here."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            work()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_load_a_forked_worker_adds_is_seen_by_its_sibling_and_forgotten_when_it_dies():
    load = SharedLoad(workers=2)

    def worker_one():
        load.worker = 1
        load.add(load.slot("http://d1:8000"), 300, 2)

    in_child(worker_one)
    load.worker = 0
    load.add(load.slot("http://d1:8000"), 100, 1)
    assert load.totals(load.slot("http://d1:8000")) == (400, 3)
    assert load.totals(load.slot("http://d2:8000")) == (0, 0)
    load.forget_worker(1)
    assert load.totals(load.slot("http://d1:8000")) == (100, 1)


def test_a_url_gets_the_same_slot_in_every_worker_whatever_order_they_meet_backends():
    load = SharedLoad(workers=2)
    urls = [f"http://10.0.0.{i}:8100" for i in range(50)]

    def worker_one():
        load.worker = 1
        for url in reversed(urls):
            load.add(load.slot(url), 1, 1)

    in_child(worker_one)
    slots = [load.slot(url) for url in urls]
    assert len(set(slots)) == len(urls)
    assert all(load.totals(slot) == (1, 1) for slot in slots)  # the child's counts landed where the parent looks


def worker_backend(load: SharedLoad, worker: int, url: str = "http://10.0.0.9:8200"):
    """The backend at `url` as worker `worker` of a proxy sharing `load` sees it."""
    load.worker = worker
    return BackendPool(lambda: CircuitBreaker(3, 10), load).add(Endpoint(url, "decode", "d"))


def test_backends_in_a_pool_with_shared_load_route_on_the_whole_hosts_load():
    load = SharedLoad(workers=2)
    in_child(lambda: worker_backend(load, 1).lease(500))  # held while that worker lives
    backend = worker_backend(load, 0)
    lease = backend.lease(20)
    assert (backend.own_tokens(), backend.own_requests()) == (520, 2)
    assert (backend.load_tokens, backend.inflight) == (20, 1)  # this process's part, as /health reports it
    lease.release()
    assert (backend.own_tokens(), backend.own_requests()) == (500, 1)


def test_worker_metrics_merge_into_one_proxys():
    def metrics(requests: int, up: bool, ttft: float) -> bytes:
        pool = BackendPool(lambda: CircuitBreaker(1, 10))
        backend = pool.add(Endpoint("http://10.0.0.1:8000", "decode", "decode-0"))
        if not up:
            backend.breaker.record_failure()
        worker = ProxyMetrics(pool)
        worker.request_outcome("/v1/completions", "200").inc(requests)
        worker.first_token_seconds.observe(ttft)
        return worker.exposition()

    merged = merge_expositions([metrics(3, True, 0.02), metrics(4, False, 0.3)]).decode()
    assert 'ascend_pd_proxy_requests_total{endpoint="/v1/completions",outcome="200"} 7.0' in merged
    assert "ascend_pd_proxy_first_token_seconds_count 2.0" in merged
    assert 'ascend_pd_proxy_first_token_seconds_bucket{le="0.025"} 1.0' in merged
    # one worker still routes to the backend: the host does
    up = [line for line in merged.splitlines() if line.startswith("ascend_pd_proxy_backend_up{")]
    assert len(up) == 1 and up[0].endswith(" 1.0")


def test_one_workers_reading_of_an_engine_is_every_workers():
    load = SharedLoad(workers=2)
    in_child(lambda: worker_backend(load, 0).read_engine(requests=7, kv_usage=0.5, fresh_for=60))
    backend = worker_backend(load, 1)
    assert backend.engine is not None and backend.engine.requests == 7 and backend.engine.kv_usage == 0.5
    assert backend.foreign_requests() == 7  # no worker had a request on it when it was read
    assert backend.foreign_requests(now=backend.engine.fresh_until + 1) == 0  # stale


def test_a_backend_never_read_has_no_shared_reading():
    backend = worker_backend(SharedLoad(workers=2), 0, "http://10.0.0.3:8200")
    assert backend.engine is None and backend.foreign_requests() == 0
