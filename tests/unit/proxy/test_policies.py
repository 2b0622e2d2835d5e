"""Routing policies: least-loaded spreads idle load and prefers the lighter backend; prefix affinity follows
prefixes but not onto an overloaded backend; the index stays bounded."""

import random
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from ascend_pd.errors import InputError
from ascend_pd.proxy.backends import Backend
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.endpoints import Endpoint
from ascend_pd.proxy.policies import RouteRequest, make_policy
from ascend_pd.proxy.policies.least_loaded import LeastLoaded
from ascend_pd.proxy.policies.prefix_affinity import PrefixAffinity
from ascend_pd.proxy.prefix_index import PrefixIndex

REQUEST = RouteRequest("prompt", 10)


def backends(count: int) -> list[Backend]:
    return [Backend(Endpoint(f"http://10.0.0.{i}:8000", "decode", f"d{i}"), CircuitBreaker(3, 10))
            for i in range(count)]


def test_idle_backends_all_get_traffic_under_least_loaded():
    pool = backends(4)
    policy = LeastLoaded(random.Random(1))
    picks = Counter(policy.choose(pool, REQUEST).url for _ in range(400))
    assert set(picks) == {b.url for b in pool}
    assert min(picks.values()) >= 60  # 100 each on average; "always node 0" would give 400/0/0/0


def test_two_idle_backends_alternate_even_with_a_fixed_random_order():
    class SameOrder(random.Random):
        def sample(self, population, k):
            return list(population)[:k]

    policy = LeastLoaded(SameOrder())
    pool = backends(2)
    assert [policy.choose(pool, REQUEST).url for _ in range(4)] == [pool[1].url, pool[0].url] * 2


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=2, unique=True))
def test_of_two_backends_least_loaded_always_takes_the_lighter(loads):
    pool = backends(2)
    for backend, load in zip(pool, loads):
        backend.load_tokens = load
    assert LeastLoaded().choose(pool, REQUEST).load_tokens == min(loads)


def test_least_loaded_never_picks_the_heaviest_of_many():
    pool = backends(5)
    for index, backend in enumerate(pool):
        backend.load_tokens = index * 100
    picks = {LeastLoaded(random.Random(seed)).choose(pool, REQUEST).url for seed in range(200)}
    assert pool[-1].url not in picks  # p2c only picks the heaviest if it is sampled twice, which it cannot be


def test_round_robin_cycles_in_order():
    pool = backends(3)
    policy = make_policy("round-robin")
    assert [policy.choose(pool, REQUEST).url for _ in range(6)] == [b.url for b in pool] * 2


def test_unknown_policy_names_the_choices():
    with pytest.raises(InputError) as error:
        make_policy("fastest")
    assert "least-loaded" in error.value.fix and "prefix-affinity" in error.value.fix


def test_prefix_affinity_sends_a_shared_prefix_back_to_the_same_backend():
    pool = backends(4)
    policy = PrefixAffinity(PrefixIndex(block_chars=16))
    system = "You are a helpful assistant. " * 4
    first = policy.choose(pool, RouteRequest(system + "question one", 10))
    first.load_tokens += 10
    again = [policy.choose(pool, RouteRequest(system + f"question {i}", 10)) for i in range(10)]
    assert {b.url for b in again} == {first.url}


def test_prefix_affinity_leaves_an_overloaded_backend():
    pool = backends(2)
    policy = PrefixAffinity(PrefixIndex(block_chars=16), balance_tokens=100)
    prompt = "x" * 64
    owner = policy.choose(pool, RouteRequest(prompt, 10))
    owner.load_tokens = 1000
    assert policy.choose(pool, RouteRequest(prompt, 10)) is not owner


def test_prefix_index_memory_is_bounded():
    index = PrefixIndex(block_chars=8, max_entries=50)
    for i in range(1000):
        index.record(f"{i:08d}" * 4, "http://a")
    assert len(index) == 50


def test_prefix_index_matches_whole_blocks_only():
    index = PrefixIndex(block_chars=4)
    index.record("abcdefgh", "http://a")
    assert index.longest_match("abcdXXXX", {"http://a"}) == "http://a"  # first block shared
    assert index.longest_match("abcXXXXX", {"http://a"}) is None
    assert index.longest_match("abcdefgh", {"http://b"}) is None  # the owner is not a candidate
