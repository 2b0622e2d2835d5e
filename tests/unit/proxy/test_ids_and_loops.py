"""Request and transfer ids, unguessable and unique, and the event loop choice (uvloop when importable)."""

import asyncio
import os
import subprocess
import sys

import pytest

from ascend_pd.proxy import event_loop
from ascend_pd.proxy.ids import REQUEST_ID, new_request_id, new_transfer_id


def test_request_ids_are_unique_and_found_by_the_metaserver_pattern():
    ids = [new_request_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    for request_id in ids[:3]:
        decorated = f"cmpl-{request_id}-0"  # how vLLM reports the X-Request-Id it was given
        assert REQUEST_ID.search(decorated).group() == request_id


def test_transfer_ids_are_32_hex_digits_and_never_repeat():
    ids = {new_transfer_id() for _ in range(10_000)}
    assert len(ids) == 10_000
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in ids)


MINT_IN_A_FRESH_PROCESS = """
from ascend_pd.proxy.ids import new_request_id, new_transfer_id
for _ in range(200):
    print(new_request_id(), new_transfer_id())
"""


def ids_of_a_fresh_process() -> tuple[list[str], list[str]]:
    """The ids a newly started proxy process mints first."""
    lines = subprocess.run([sys.executable, "-c", MINT_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                           check=True).stdout.split("\n")
    pairs = [line.split() for line in lines if line]
    return [r for r, _ in pairs], [t for _, t in pairs]


def test_proxy_processes_started_alike_mint_disjoint_ids():
    # Three processes started the same way, as replicas or restarts are: ids seeded from anything two processes
    # can share fail here.
    runs = [ids_of_a_fresh_process() for _ in range(3)]
    for request_ids, transfer_ids in runs:
        assert all(REQUEST_ID.fullmatch(r) for r in request_ids)
        assert all(len(t) == 32 and int(t, 16) >= 0 for t in transfer_ids)
    minted = [set(request_ids) | {f"pd-{t}" for t in transfer_ids} for request_ids, transfer_ids in runs]
    assert sum(map(len, minted)) == len(set().union(*minted))


def test_forked_workers_mint_ids_their_parent_and_siblings_never_do():
    # `ascend-pd proxy --workers N` forks after the import: the workers must not inherit the parent's id state
    def child_ids() -> set[str]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, " ".join(new_request_id() for _ in range(50)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            minted = set(pipe.read().split())
        os.waitpid(pid, 0)
        return minted

    first, second = child_ids(), child_ids()
    here = {new_request_id() for _ in range(50)}
    assert len(first) == len(second) == 50
    assert not first & second and not first & here and not second & here


def test_one_id_says_nothing_about_the_next():
    """A client sees its request ids: from one it must not guess another request's (a prefix and a counter would
    give it the next id at once) or a transfer's."""
    request_ids = [new_request_id()[3:] for _ in range(2000)]
    transfer_ids = [new_transfer_id() for _ in range(2000)]
    for ids in (request_ids, transfer_ids):
        assert len({i[:8] for i in ids}) > 1900  # no shared prefix
        assert all(abs(int(a, 16) - int(b, 16)) > 1 << 64 for a, b in zip(ids, ids[1:]))  # no counter


def test_asyncio_is_always_available():
    assert event_loop.resolve("asyncio") == "asyncio"
    loop, name = event_loop.new_event_loop("asyncio")
    try:
        assert name == "asyncio" and isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()


def test_auto_picks_uvloop_when_importable():
    pytest.importorskip("uvloop")
    assert event_loop.resolve("auto") == "uvloop"

    async def running_loop_module():
        return type(asyncio.get_running_loop()).__module__

    assert event_loop.run(running_loop_module(), "auto").startswith("uvloop")


def test_without_uvloop_auto_falls_back_and_asking_for_it_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` raise ImportError
    assert event_loop.resolve("auto") == "asyncio"
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        event_loop.resolve("uvloop")

    async def answer():
        return 42

    assert event_loop.run(answer(), "auto") == 42


def test_memory_probe_is_off_without_its_variable():
    import tracemalloc

    from ascend_pd.proxy.memory_trace import install_from_environment

    loop = asyncio.new_event_loop()
    try:
        assert install_from_environment(loop, environ={}) is None
        assert not tracemalloc.is_tracing()
    finally:
        loop.close()


def test_a_snapshot_appears_under_its_name_only_when_whole(tmp_path, monkeypatch):
    import tracemalloc

    from ascend_pd.proxy import memory_trace

    seen = []
    real_replace = memory_trace.os.replace

    def replace(src, dst):  # what a reader globbing the directory finds just before the rename
        seen.append(sorted(p.name for p in tmp_path.glob("proxy-*.tracemalloc")))
        real_replace(src, dst)

    monkeypatch.setattr(memory_trace.os, "replace", replace)
    tracemalloc.start()
    try:
        path = memory_trace.SnapshotWriter(tmp_path).write()
    finally:
        tracemalloc.stop()
    assert seen == [[]]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert tracemalloc.Snapshot.load(str(path)).traces is not None
