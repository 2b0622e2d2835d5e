"""Shell text shared by the bash launchers and the Kubernetes pods: the header, a node's section, the start helper."""

from __future__ import annotations

import shlex
import textwrap
from typing import Iterable

from ascend_pd.render.environment import CpuCores
from ascend_pd.render.processes import LaunchPlan, NodePlan, Process

HEADER = """\
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG_DIR="${LOG_DIR:-$HERE/logs}"
RUN_DIR="${RUN_DIR:-$HERE/run}"
mkdir -p "$LOG_DIR" "$RUN_DIR"

# start NAME COMMAND...: run COMMAND in a session of its own (so stop can signal the whole process tree), send its
# output to $LOG_DIR/NAME.log and keep its pid in $RUN_DIR/NAME.pid.
# With ONLY set (to names separated by spaces), start() starts only the processes it names.
start() {
  local name="$1"
  shift
  if [[ -n "${ONLY:-}" && " $ONLY " != *" $name "* ]]; then
    return 0
  fi
  local pidfile="$RUN_DIR/$name.pid"
  if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$name is already running (pid $(cat "$pidfile"))"
    return 0
  fi
  setsid "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null &
  local pid=$! tries=0
  echo "$pid" >"$pidfile"
  # The process leads a group of its own only once setsid has run in it: wait for that (5 s at most), so that a
  # stop right after this finds the group.
  until kill -0 -- "-$pid" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null || ((++tries > 50)); do
    sleep 0.1
  done
  echo "started $name (pid $pid), log $LOG_DIR/$name.log"
}
"""

# Mooncake's Ascend wheel ships shared libraries beside its Python package; the Ascend direct transport loads them.
MOONCAKE_LIBRARY_PATH = """\
MOONCAKE_LIB="$(python3 -c 'import os, mooncake; print(os.path.dirname(mooncake.__file__))' 2>/dev/null || true)"
export LD_LIBRARY_PATH="${MOONCAKE_LIB}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"""


# vLLM's CPU workers spin while they wait (for the scheduler's next step, for the TP all-reduce), so two processes
# pinned to one core starve each other and the Transfer Engine threads they share it with: one 56-block read from a
# P TP2 rank went past Mooncake's 30 s timeout that way, and took 1-3 s with the kernel free to spread the processes.
CPU_CORES = """\
# cpu_cores DEVICE...: the cores of these CPU devices (device ids are core ids), or "nobind" on a host with fewer
# cores than the processes of this node use.
cpu_cores() {
  if (( NODE_CPU_DEVICES > $(nproc) )); then
    echo nobind
    return
  fi
  local IFS="|"
  echo "$*"
}
"""


NOTE_WIDTH = 110  # columns of the comment lines that explain a command


def quote(value: str) -> str:
    return shlex.quote(value)


def _argv_lines(argv: Iterable[str], indent: str) -> list[str]:
    """The command with each --flag and its value on a line of its own."""
    lines: list[list[str]] = [[]]
    for token in argv:
        if token.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(quote(token))
    return [indent + " ".join(words) for words in lines]


def process_summary(process: Process) -> str:
    kv = ""
    if process.kv_port is not None:
        last = process.kv_port + len(process.devices) - 1
        ports = f"{process.kv_port}" if last == process.kv_port else f"{process.kv_port}-{last}"
        kv = f", kv ports {ports}, engine {process.engine_id}"
    devices = ",".join(str(d) for d in process.devices)
    part = f" part {process.node_rank + 1} (headless)" if process.http_port is None else ""
    http = "" if process.http_port is None else f", http {process.http_port}"
    return f"{process.instance} DP rank {process.dp_rank}{part} ({process.role}): devices {devices}{http}{kv}"


def _assignment(key: str, value: str | CpuCores) -> str:
    if isinstance(value, CpuCores):
        return f'{key}="$(cpu_cores {" ".join(str(d) for d in value.devices)})"'
    return quote(f"{key}={value}")


def start_lines(process: Process) -> list[str]:
    head = " ".join([*(quote(w) for w in ("start", process.name, "env")),
                     *(_assignment(k, v) for k, v in process.env)])
    body = _argv_lines(process.argv, "    ")
    notes = [f"# {line}" for note in process.notes for line in textwrap.wrap(note, NOTE_WIDTH)]
    lines = [f"# {process_summary(process)}", *notes, head + " \\"]
    lines += [line + " \\" for line in body[:-1]] + [body[-1]]
    return lines


def metaserver_no_proxy(hosts: list[str]) -> list[str]:
    """Lines that add the proxy replicas' `hosts` to no_proxy (and NO_PROXY), keeping what the environment lists.
    D posts to a replica's metaserver with httpx (vllm-ascend's layerwise connector, v0.23.0 to main), which would
    send the post, and the request's token in its URL, through an HTTP proxy the environment names."""
    return ["# D posts to the proxy's metaserver with httpx, which would go through an HTTP proxy the environment",
            "# names (http_proxy): the proxy replicas' addresses join no_proxy.",
            'no_proxy="${no_proxy:-${NO_PROXY:-}}"',
            f'export no_proxy="${{no_proxy:+$no_proxy,}}{",".join(dict.fromkeys(hosts))}"',
            'export NO_PROXY="$no_proxy"']


def node_section(plan: LaunchPlan, node: NodePlan, processes: Iterable[Process]) -> list[str]:
    """The exports every process of `node` shares, then one start per process."""
    processes = list(processes)
    lines = [f"# Node {node.name}: host {node.network.host_ip}, interface {node.network.interface}."]
    lines += [f"export {key}={quote(value)}" for key, value in node.env]
    if plan.deployment.connector.layerwise:
        lines += metaserver_no_proxy([replica.network.host_ip for replica in plan.proxies])
    if plan.platform == "cpu":
        if any(isinstance(value, CpuCores) for process in processes for _, value in process.env):
            used = 1 + max(d for p in processes for d in p.devices)
            lines += ["", f"NODE_CPU_DEVICES={used}  # cores the processes below need, one per device id",
                      *CPU_CORES.splitlines()]
    else:
        lines += MOONCAKE_LIBRARY_PATH.splitlines()
    for process in processes:
        lines.append("")
        lines += start_lines(process)
    return lines


def script(description: list[str], body: list[str]) -> str:
    comment = [f"# {line}" if line else "#" for line in description]
    return "\n".join(["#!/usr/bin/env bash", *comment,
                      "# Written by `ascend-pd render`: render again rather than edit.", HEADER, *body]) + "\n"
