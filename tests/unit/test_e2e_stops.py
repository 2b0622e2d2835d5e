"""The e2e suite leaves a finished stack's stop scripts running while it goes on, and at its end waits for them and
names every one that failed."""

import time

import pytest

from tests.e2e import stack
from tests.e2e.stack import Stack, wait_for_stops


@pytest.fixture(autouse=True)
def no_stops_from_elsewhere(monkeypatch):
    monkeypatch.setattr(stack, "STOPPING", [])


def stack_with_stop_scripts(tmp_path, **scripts: str) -> Stack:
    running = Stack({}, tmp_path / "work", tmp_path / "logs")
    running.render_dir.mkdir(parents=True)
    for name, body in scripts.items():
        (running.render_dir / f"stop-{name}.sh").write_text(body)
    return running


def test_a_stop_left_running_is_waited_for_at_the_end_and_a_failed_one_is_named(tmp_path):
    running = stack_with_stop_scripts(tmp_path, slow="sleep 1; touch \"$LOG_DIR/stopped\"\n",
                                      broken="echo 'no such process group' >&2; exit 3\n")
    running.logs.mkdir()
    started = time.monotonic()
    running.stop(wait=False)
    assert time.monotonic() - started < 0.5
    problems = wait_for_stops()
    assert len(problems) == 1 and "stop-broken.sh exited 3" in problems[0] and "no such process group" in problems[0]
    assert (running.logs / "stopped").exists()
    assert stack.STOPPING == []


def test_a_stop_that_is_waited_for_has_ended_when_it_returns(tmp_path):
    running = stack_with_stop_scripts(tmp_path, slow="sleep 0.5; touch \"$LOG_DIR/stopped\"\n")
    running.logs.mkdir()
    running.stop()
    assert (running.logs / "stopped").exists()
    assert wait_for_stops() == []
