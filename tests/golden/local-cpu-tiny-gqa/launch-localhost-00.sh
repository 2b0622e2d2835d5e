#!/usr/bin/env bash
# Start every serving process of deployment 'tiny-gqa-cpu' on node localhost-00, or only the processes named as arguments.
# Processes run in the background; logs go to $LOG_DIR (default: logs/ beside this script).
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

ONLY="$*"

# The deployment's secrets (render made them; they travel with this directory, never in a command).
export ASCEND_PD_KV_SECRET_FILE="$HERE/secrets/kv.key"
[[ -r "$ASCEND_PD_KV_SECRET_FILE" ]] || { echo "$ASCEND_PD_KV_SECRET_FILE is missing: copy the whole bundle, secrets/ included" >&2; exit 1; }

# Node localhost-00: host 127.0.0.1, interface lo.
export VLLM_HOST_IP=127.0.0.1
export GLOO_SOCKET_IFNAME=lo

# prefill-0 DP rank 0 (prefill): devices 0, http 8100, kv ports 26000, engine prefill-0
start prefill-0-dp0 env VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 \
    python3 -m vllm.entrypoints.openai.api_server \
    --model models/tiny-llama-gqa \
    --host 127.0.0.1 \
    --port 8100 \
    --served-model-name tiny-llama-gqa \
    --tensor-parallel-size 1 \
    --max-model-len 1024 \
    --max-num-batched-tokens 1024 \
    --max-num-seqs 8 \
    --gpu-memory-utilization 0.9 \
    --block-size 32 \
    --trust-remote-code \
    --dtype float32 \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_producer","kv_port":26000,"engine_id":"prefill-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"pull","protocol":"tcp","ascend_pd_shapes":{"prefill":{"tp_size":1,"dp_size":1},"decode":{"tp_size":1,"dp_size":1}},"abort_timeout_s":480}}'

# decode-0 DP rank 0 (decode): devices 1, http 8200, kv ports 26100, engine decode-0
start decode-0-dp0 env VLLM_CPU_KVCACHE_SPACE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 \
    python3 -m vllm.entrypoints.openai.api_server \
    --model models/tiny-llama-gqa \
    --host 127.0.0.1 \
    --port 8200 \
    --served-model-name tiny-llama-gqa \
    --tensor-parallel-size 1 \
    --max-model-len 1024 \
    --max-num-batched-tokens 1024 \
    --max-num-seqs 8 \
    --gpu-memory-utilization 0.9 \
    --block-size 32 \
    --trust-remote-code \
    --dtype float32 \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":26100,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"pull","protocol":"tcp","ascend_pd_shapes":{"prefill":{"tp_size":1,"dp_size":1},"decode":{"tp_size":1,"dp_size":1}}}}'
