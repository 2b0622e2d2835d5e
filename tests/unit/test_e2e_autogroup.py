"""The e2e suite turns the kernel's autogroup scheduling off for its run and always sets it back as it was."""

from pathlib import Path

import pytest

from tests.e2e import autogroup


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    monkeypatch.setattr(autogroup, "STATE", [])


def test_the_switch_is_off_during_the_run_and_back_after_even_on_failure(tmp_path):
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("1\n")
    with pytest.raises(RuntimeError), autogroup.off_for_the_run(switch):
        assert switch.read_text() == "0"
        raise RuntimeError("a test failed")
    assert switch.read_text() == "1"
    assert "off for the run" in autogroup.STATE[0]


def test_a_switch_already_off_or_missing_is_left_alone(tmp_path):
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("0\n")
    with autogroup.off_for_the_run(switch):
        pass
    with autogroup.off_for_the_run(tmp_path / "absent"):
        pass
    assert switch.read_text() == "0\n"
    assert autogroup.STATE == ["autogroup scheduling was already off", "the kernel has no autogroup scheduling"]


def test_a_switch_it_cannot_write_leaves_the_run_going_and_says_the_case_may_stall():
    switch = Path("/proc/version")  # read by anyone, written by no one: as the real switch is to a user
    before = switch.read_text()
    with autogroup.off_for_the_run(switch):
        pass
    assert switch.read_text() == before
    assert "stays on" in autogroup.STATE[0] and "may stall" in autogroup.STATE[0]
