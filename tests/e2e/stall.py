"""Where a stalled request's time goes. A request that is still waiting after `after_s` gets the Python and native
stacks of every process of its stack (py-spy dump, taken while it waits) written next to the stack's logs, once;
the run's summary names the file. On two cores a KV read has stalled past the Transfer Engine's timeout
(docs/testing.md): the next time it does, the stacks say where."""

from __future__ import annotations

import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

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


def dump_stacks(pids: list[int], out: Path) -> Path:
    spy = shutil.which("py-spy")
    with out.open("w") as file:
        for pid in pids:
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except OSError:
                continue
            file.write(f"==== pid {pid}: {command}\n")
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
