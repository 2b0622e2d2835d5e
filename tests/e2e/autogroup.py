"""The kernel's autogroup scheduling, off while the e2e suite runs where it can be.

The launch scripts start every process in a session of its own (setsid), and with `kernel.sched_autogroup_enabled`
the kernel schedules each session as one group. On two cores shared by the TP2 case's three engines, that starved
the decode engine: its threads waited 100 s runnable while the prefill's two TP workers ran, yielding in vLLM's
shared-memory broadcast loop, and a loopback KV read from P outlived the Transfer Engine's 30 s timeout. The same
case with autogroup off ran its workload in 5-6 s, three runs of three, against 14-103 s with it on (docs/testing.md,
"The TP2 stall"). On a host with a core per busy thread, as an NPU node has, the grouping does not matter."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
STATE: list[str] = []  # what the run did, for the summary


@contextmanager
def off_for_the_run(switch: Path = SWITCH):
    """Autogroup scheduling off until the block ends, then as it was; where the kernel has none or the switch cannot
    be written (not root), the run goes on as the host is and says so."""
    before = _turn_off(switch)
    try:
        yield
    finally:
        if before is not None:
            switch.write_text(before)


def _turn_off(switch: Path) -> str | None:
    """The switch's value before, when this turned it off; None when it was left as it was."""
    try:
        before = switch.read_text().strip()
    except OSError:
        STATE.append("the kernel has no autogroup scheduling")
        return None
    if before == "0":
        STATE.append("autogroup scheduling was already off")
        return None
    try:
        switch.write_text("0")
    except OSError as error:
        STATE.append(f"autogroup scheduling stays on ({error.strerror} writing {switch}): the TP2 case may stall")
        return None
    STATE.append(f"autogroup scheduling off for the run ({switch} was {before}, set back after)")
    return before
