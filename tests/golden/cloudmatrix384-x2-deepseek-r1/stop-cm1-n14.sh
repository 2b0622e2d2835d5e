#!/usr/bin/env bash
# Stop what launch-cm1-n14.sh (and launch-proxy.sh, on the proxy node) started on cm1-n14.
# With process names as arguments, only those.
# Written by `ascend-pd render`: render again rather than edit.
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

# stop NAME...: SIGTERM each process group start() created, then SIGKILL what is left after STOP_TIMEOUT seconds.
stop() {
  local pids=() name pidfile pid
  for name in "$@"; do
    pidfile="$RUN_DIR/$name.pid"
    [[ -f "$pidfile" ]] || continue
    pid="$(cat "$pidfile")"
    if kill -TERM -- "-$pid" 2>/dev/null; then
      echo "stopping $name (pid $pid)"
      pids+=("$pid")
    fi
    rm -f "$pidfile"
  done
  local deadline=$((SECONDS + ${STOP_TIMEOUT:-30}))
  for pid in "${pids[@]}"; do
    while kill -0 -- "-$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}

if (( $# )); then
  stop "$@"
else
  stop prefill-42-dp0
fi
