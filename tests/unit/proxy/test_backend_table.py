"""One worker's copy of the backend table: only a newer generation is served, the file at start counts only for the
deployment revision the proxy serves, a later write to it is taken up, a bad file is a clear error at start but
never stops a running worker, a reader never sees half a table, and every backend URL is one the proxy can call."""

import os
import threading

import msgspec
import pytest

from ascend_pd.errors import InputError
from ascend_pd.proxy.backend_table import BackendTable, TableEntry, decode_table, draining, read_table, write_table
from ascend_pd.proxy.backends import BackendPool
from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.table_keeper import TableKeeper
from tests.threads import fine_thread_switching

P, D1, D2 = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"
START = BackendTable(0, "rev-a", [TableEntry(P, "prefill"), TableEntry(D1, "decode"), TableEntry(D2, "decode")])


def keeper(path=None) -> TableKeeper:
    return TableKeeper(BackendPool(lambda: CircuitBreaker(3, 10.0)), START, path)


def serving(made: TableKeeper) -> dict[str, bool]:
    return {b.url: b.draining for b in made.pool.all()}


def test_only_a_newer_generation_is_served_and_a_backend_kept_keeps_its_load():
    made = keeper()
    lease = made.pool.get(D1).lease(100)
    assert made.offer(draining(START, D1)) is True
    assert serving(made) == {P: False, D1: True, D2: False}
    assert made.pool.get(D1).own_tokens() == 100  # the same backend, drained, with its request
    lease.release()
    assert made.offer(START) is False and serving(made)[D1] is True  # an older table changes nothing


def test_the_file_at_start_counts_only_for_the_revision_the_proxy_serves(tmp_path):
    path = tmp_path / "backends.json"
    write_table(path, BackendTable(7, "rev-a", [TableEntry(P, "prefill"), TableEntry(D2, "decode")]))
    assert serving(keeper(path)) == {P: False, D2: False}  # changes made to this deployment since it started
    write_table(path, BackendTable(9, "rev-old", [TableEntry(P, "prefill")]))  # what ran before a re-render
    made = keeper(path)
    assert serving(made) == {P: False, D1: False, D2: False} and made.table.generation == 0
    made.poll_file()  # the same stale file is not taken up by the first look either
    assert made.table.generation == 0
    write_table(path, BackendTable(10, "rev-b", [TableEntry(P, "prefill"), TableEntry(D1, "decode")]))
    os.utime(path, ns=(1, 1))  # a later write (the kubelet, the autoscaler) the poll sees as a change
    made.poll_file()
    assert made.table.generation == 10 and serving(made) == {P: False, D1: False}


def test_a_newer_table_offered_over_http_goes_to_the_file_for_a_restart(tmp_path):
    path = tmp_path / "backends.json"
    made = keeper(path)
    made.offer(draining(START, D2))
    assert read_table(path) == draining(START, D2)
    assert serving(keeper(path)) == {P: False, D1: False, D2: True}


def test_a_bad_file_is_a_clear_error_at_start_and_a_running_worker_keeps_its_table(tmp_path):
    path = tmp_path / "backends.json"
    path.write_text('{"generation": 3, "revision": "rev-a", "backends": [{"url": "http://x:1", "role": "router"}]}')
    with pytest.raises(InputError) as refused:
        keeper(path)
    assert refused.value.file == str(path) and refused.value.field == "backends.0.role"
    path.unlink()
    made = keeper(path)
    path.write_text('{"generation": 4, "revis')  # half-written by hand
    made.poll_file()
    assert made.table.generation == 0 and len(made.pool.all()) == 3


def big_table(generation: int) -> BackendTable:
    """A table large enough that writing it in place takes more than one write call."""
    return BackendTable(generation, "rev-a", [TableEntry(f"http://10.0.{i // 250}.{i % 250}:8000", "decode",
                                                         instance=f"decode-{generation}-{i}" * 4)
                                              for i in range(1500 if generation % 2 else 500)])


def test_a_reader_racing_the_writer_sees_a_whole_table_every_time(tmp_path):
    path = tmp_path / "backends.json"
    write_table(path, big_table(0))
    written, seen, broken = 60, [], []
    done = threading.Event()

    def read_forever() -> None:
        while not done.is_set():
            try:
                table = read_table(path)
            except InputError as exc:
                broken.append(exc)
                continue
            seen.append(table.generation)
            if table != big_table(table.generation):
                broken.append(f"generation {table.generation} read back otherwise")

    with fine_thread_switching():
        reader = threading.Thread(target=read_forever)
        reader.start()
        try:
            for generation in range(1, written):
                write_table(path, big_table(generation))
        finally:
            done.set()
            reader.join()
    assert not broken, f"{len(broken)} reads saw part of a table: {broken[0]}"
    # the reader did race the writer: it read tables of several generations while they were being written (how many
    # reads it makes depends on what else the machine runs)
    assert len(set(seen)) > 2
    assert read_table(path).generation == written - 1


@pytest.mark.parametrize("url, said", [("https://10.0.0.1:8000", "http only"), ("http://10.0.0.1", "not a backend"),
                                       ("http://10.0.0.1:8000/v1", "not a backend"),
                                       ("http://admin:pw@10.0.0.1:8000", "not a backend"),
                                       ("http://10.0.0.1:8000#x", "not a backend"),
                                       ("http://10.0.0.1:99999", "not a backend"),
                                       ("http://10.0.0.1:8000/", "as the proxy names backends")])
def test_a_table_with_a_backend_the_proxy_could_not_call_as_written_is_refused_naming_it(url, said):
    body = msgspec.json.encode(BackendTable(1, "rev-a", [TableEntry(P, "prefill"), TableEntry(url, "decode")]))
    with pytest.raises(InputError, match=said) as refused:
        decode_table(body, "backends.json")
    assert url in refused.value.message and refused.value.field == "backends.1.url"
    assert refused.value.fix and "http://" in refused.value.fix


def test_ipv6_backends_keep_their_brackets():
    body = msgspec.json.encode(BackendTable(1, "rev-a", [TableEntry("http://[fd00::1]:8000", "decode")]))
    assert decode_table(body, "backends.json").backends[0].url == "http://[fd00::1]:8000"
