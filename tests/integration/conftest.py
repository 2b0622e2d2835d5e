"""Integration tests mostly wait on sockets and peers, so they run in several pytest-xdist workers at once. A test
marked `alone` judges what the CPUs get done in a given time: it waits for the tests running in the other workers
to end, and they wait for it."""

from __future__ import annotations

import os

import pytest
from filelock import ReadWriteLock


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs with no other test on the machine, even under pytest-xdist")


@pytest.fixture(autouse=True)
def machine(request, tmp_path_factory):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    # the workers' base temporary directories share this parent, which is the run's own
    lock = ReadWriteLock(tmp_path_factory.getbasetemp().parent / "machine.lock")
    with lock.write_lock() if request.node.get_closest_marker("alone") else lock.read_lock():
        yield
