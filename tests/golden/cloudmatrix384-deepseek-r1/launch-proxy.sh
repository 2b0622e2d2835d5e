#!/usr/bin/env bash
# Start the ascend-pd proxy of deployment 'deepseek-r1-cloudmatrix384' on node cm0-n00; it reads its backends from deployment.yaml.
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

# The deployment's secrets (render made them; they travel with this directory, never in a command).
export ASCEND_PD_PROXY_ADMIN_TOKEN_FILE="$HERE/secrets/admin.token"
[[ -r "$ASCEND_PD_PROXY_ADMIN_TOKEN_FILE" ]] || { echo "$ASCEND_PD_PROXY_ADMIN_TOKEN_FILE is missing: copy the whole bundle, secrets/ included" >&2; exit 1; }

# The proxy listens on 192.168.16.11:8080. The backend table holds the changes made
# since the deployment file was written (ascend-pd autoscale, the admin API); a restart keeps them.
start proxy ascend-pd proxy --deployment "$HERE/deployment.yaml" --backend-table "$HERE/backends.json" --host 192.168.16.11 --port 8080 --workers 1
