"""What the autoscaler writes while others read it (the deployment file, the backends ConfigMap manifest) is never
seen half written, and one autoscaler at a time runs a deployment: a second is refused at start, naming the first."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from ascend_pd.autoscale.lock import LOCK_FILE, AutoscalerLock
from ascend_pd.autoscale.stores import ConfigMapStore
from ascend_pd.deploy import load_deployment, write_deployment
from ascend_pd.errors import InputError
from ascend_pd.proxy.backend_table import BackendTable, TableEntry
from tests.threads import fine_thread_switching

from .bundles import example_bundle, one_more_decode, saved_window


def race(write: Callable[[int], None], read: Callable[[], object], writes: int) -> tuple[int, list[Exception]]:
    """`write(i)` `writes` times while another thread calls `read()` in a loop, from its first read on: how many
    reads ran, and what the reads that failed raised. How many overlap a write is up to the scheduler."""
    reads, failed = 0, []
    reading, done = threading.Event(), threading.Event()

    def read_forever() -> None:
        nonlocal reads
        while not done.is_set():
            try:
                read()
            except Exception as exc:  # what a reader of a half-written file meets
                failed.append(exc)
            reads += 1
            reading.set()

    with fine_thread_switching():
        reader = threading.Thread(target=read_forever)
        reader.start()
        try:
            assert reading.wait(30), "the reader never read"
            for i in range(writes):
                write(i)
        finally:
            done.set()
            reader.join()
    return reads, failed


def test_the_deployment_file_the_autoscaler_rewrites_is_never_seen_half_written(tmp_path):
    deployment_file = example_bundle(tmp_path, "bash")
    current = load_deployment(deployment_file)
    bigger, _ = one_more_decode(current)
    versions = [current.deployment, bigger]
    reads, failed = race(lambda i: write_deployment(versions[i % 2], deployment_file),
                         lambda: load_deployment(deployment_file), 150)
    assert reads > 0 and not failed, f"{len(failed)} of {reads} reads failed: {failed[:1]}"
    assert load_deployment(deployment_file).deployment == versions[1]


def test_the_backends_configmap_manifest_is_never_seen_half_written(tmp_path):
    manifest = tmp_path / "k8s" / "backends.yaml"
    store = ConfigMapStore(tmp_path / "backends.json", manifest, "tiny", "true", 10.0)
    tables = [BackendTable(g, "rev", [TableEntry(f"http://10.0.0.{i}:8000", "decode") for i in range(1 + g % 2 * 200)])
              for g in range(60)]
    store.write(tables[0])
    reads, failed = race(lambda i: store.write(tables[i]), lambda: json.loads(manifest.read_text()), len(tables))
    assert reads > 0 and not failed, f"{len(failed)} of {reads} reads failed: {failed[:1]}"


def test_a_second_lock_on_the_same_deployment_is_refused_naming_the_holder_until_it_lets_go(tmp_path):
    deployment_file = tmp_path / "deployment.yaml"
    first = AutoscalerLock(deployment_file)
    with pytest.raises(InputError) as refused:
        AutoscalerLock(deployment_file)
    assert f"pid {os.getpid()}" in refused.value.message and str(tmp_path / LOCK_FILE) in refused.value.message
    assert refused.value.field == "--deployment" and refused.value.fix
    first.close()
    AutoscalerLock(deployment_file).close()


def autoscale(deployment: Path, saved: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ascend_pd.cli.main", "autoscale", "--deployment", str(deployment),
            "--proxy", str(saved), "--dry-run", *extra]


def test_a_second_autoscaler_process_is_refused_at_start_and_one_may_start_once_the_first_is_gone(tmp_path):
    deployment = example_bundle(tmp_path, "bash")
    saved = saved_window(tmp_path)
    lock = deployment.parent / LOCK_FILE
    first = subprocess.Popen(autoscale(deployment, saved, "--interval", "600"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (lock.exists() and f"pid {first.pid} " in lock.read_text()):
            assert first.poll() is None and time.monotonic() < deadline, "the first autoscaler did not take the lock"
            time.sleep(0.05)
        second = subprocess.run(autoscale(deployment, saved, "--intervals", "1"), capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2, second.stderr
        assert "another autoscaler" in second.stderr and f"pid {first.pid}" in second.stderr
        assert str(lock) in second.stderr and "Traceback" not in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)  # no clean-up of its own: the kernel lets the lock go
        first.wait(30)
    third = subprocess.run(autoscale(deployment, saved, "--intervals", "1"), capture_output=True, text=True,
                           timeout=120)
    assert third.returncode == 0, third.stderr
