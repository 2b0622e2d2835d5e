"""Where a stalled request's time goes. A request that is still waiting after `after_s` gets, written next to the
stack's logs once (the run's summary names the file):
- every thread of its stack's processes, native ones included (the Transfer Engine's I/O thread is not a Python
  thread, so py-spy does not list it): its state, where the kernel has it wait, and over a few seconds the CPU it ran
  and the time it waited for one (/proc/<pid>/task/*/schedstat), so a starved thread shows apart from a waiting one;
- the machine's busiest processes over the same seconds, the stack's or not;
- the Python and native stacks of every process (py-spy dump).
On two cores a KV read has stalled past the Transfer Engine's timeout (docs/testing.md): the next time it does, this
says where."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

WINDOW_S = 3.0  # the seconds threads and processes are watched for
TICK = os.sysconf("SC_CLK_TCK")

DUMPED: list[str] = []  # summary lines: which request stalled, where its stacks are


def process_group(pgid: int) -> list[int]:
    """Every process of a launch script's session (the rendered launchers start each one as a group leader)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        if int(fields[2]) == pgid:  # after the command name: state, ppid, pgrp
            members.append(int(stat.parent.name))
    return sorted(members)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""  # the thread or process ended while we looked


def _threads(pids: list[int]) -> dict[tuple[int, int], tuple[str, str, str, int, int]]:
    """(pid, tid) -> (name, state, kernel wait channel, ns run, ns waited for a CPU) of every thread of `pids`."""
    found = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            stat, schedstat = _read(task / "stat"), _read(task / "schedstat").split()
            if not stat or len(schedstat) < 2:
                continue
            name, fields = stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()
            found[(pid, int(task.name))] = (name, fields[0], _read(task / "wchan") or "-", int(schedstat[0]),
                                            int(schedstat[1]))
    return found


def _cpu_by_process() -> dict[int, int]:
    """pid -> clock ticks of CPU so far, for every process on the machine."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(stat).rsplit(")", 1)[-1].split()
        if len(fields) > 13:
            ticks[int(stat.parent.name)] = int(fields[11]) + int(fields[12])
    return ticks


def _command(pid: int) -> str:
    text = _read(Path(f"/proc/{pid}/cmdline")).replace("\0", " ").replace("\n", " ")
    return text[:160] or f"pid {pid}"


def thread_report(pids: list[int], window_s: float = WINDOW_S) -> str:
    """What each thread of `pids` and the machine's busiest processes did over `window_s`."""
    started = time.monotonic()
    threads, machine = _threads(pids), _cpu_by_process()
    time.sleep(window_s)
    threads_after, machine_after = _threads(pids), _cpu_by_process()
    # the window as it was: on a starved host reading /proc and sleeping overrun the window asked for
    window_s = time.monotonic() - started
    lines = [f"threads over {window_s:.1f} s (ms on a CPU, ms runnable but waiting for one; state and kernel wait at "
             f"the end):"]
    for key, (name, state, wchan, ran, waited) in sorted(threads_after.items()):
        before = threads.get(key, (name, state, wchan, ran, waited))
        lines.append(f"  {key[0]:>7} {key[1]:>7} {name:<16} {state} {wchan:<24} ran {(ran - before[3]) / 1e6:8.1f}"
                     f"  waited {(waited - before[4]) / 1e6:8.1f}")
    lines.append(f"busiest processes on the machine over the same {window_s:.1f} s (CPU %):")
    lines += [f"  {share:6.1f}  {pid:>7}  {_command(pid)}" for share, pid in _busiest(machine, machine_after, window_s)]
    return "\n".join(lines) + "\n"


def _busiest(before: dict[int, int], after: dict[int, int], window_s: float) -> list[tuple[float, int]]:
    """(CPU % of one core, pid) of the 8 processes that used the most between two _cpu_by_process snapshots."""
    used = sorted(((ticks - before.get(pid, ticks), pid) for pid, ticks in after.items()), reverse=True)
    return [(100 * ticks / TICK / window_s, pid) for ticks, pid in used[:8] if ticks]


def busy_elsewhere(window_s: float = 2.0, least_percent: float = 25.0) -> list[str]:
    """Processes outside this one's tree that used `least_percent` of a core or more over `window_s`: on two cores
    one of them takes its share from the engines (and starved the TP2 case with autogroup scheduling on,
    docs/testing.md)."""
    before = _cpu_by_process()
    time.sleep(window_s)
    ours = _descendants(os.getpid())
    return [f"{share:.0f}% of a core: pid {pid} {_command(pid)}"
            for share, pid in _busiest(before, _cpu_by_process(), window_s)
            if share >= least_percent and pid not in ours]


def _descendants(pid: int) -> set[int]:
    tree, todo = {pid}, [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            for child in _read(task / "children").split():
                tree.add(int(child))
                todo.append(int(child))
    return tree


def dump_stacks(pids: list[int], out: Path) -> Path:
    spy = shutil.which("py-spy")
    with out.open("w") as file:
        file.write(thread_report(pids))
        for pid in pids:
            file.write(f"==== pid {pid}: {_command(pid)}\n")  # one that ended since: py-spy's line below says so
            if spy is None:
                file.write("py-spy is not installed (pip install py-spy)\n")
                continue
            try:
                done = subprocess.run([spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                                      timeout=30)
                error = done.stderr.strip().splitlines() or [f"py-spy exited {done.returncode} with no output"]
                file.write(done.stdout or f"{error[0]}\n")  # not a Python process: py-spy's first line says so
            except subprocess.TimeoutExpired:
                file.write("py-spy dump took more than 30 s\n")
    return out


@contextmanager
def stall_watch(what: str, group_pids: list[int], logs: Path, after_s: float = 15.0):
    """Around one request: if it has not returned after `after_s`, dump the stacks of the processes in the groups
    `group_pids` lead."""
    returned = threading.Event()

    def watch() -> None:
        if returned.wait(after_s):
            return
        pids = [pid for group in group_pids for pid in process_group(group)]
        out = dump_stacks(pids, logs / f"stall-{what}.txt")
        DUMPED.append(f"{what}: still waiting after {after_s:g} s; stacks of {len(pids)} processes in {out}")

    watcher = threading.Thread(target=watch, name=f"stall-watch-{what}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        returned.set()
        watcher.join(timeout=120)
