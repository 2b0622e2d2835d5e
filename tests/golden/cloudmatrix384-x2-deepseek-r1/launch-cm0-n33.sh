#!/usr/bin/env bash
# Start every serving process of deployment 'deepseek-r1-cloudmatrix384-x2' on node cm0-n33, or only the processes named as arguments.
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

# Node cm0-n33: host 192.168.16.44, interface enp189s0f0.
export VLLM_HOST_IP=192.168.16.44
export GLOO_SOCKET_IFNAME=enp189s0f0
export HCCL_IF_IP=192.168.16.44
export TP_SOCKET_IFNAME=enp189s0f0
export HCCL_SOCKET_IFNAME=enp189s0f0
export OMP_PROC_BIND=false
export OMP_NUM_THREADS=10
export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
export TASK_QUEUE_ENABLE=1
export HCCL_OP_EXPANSION_MODE=AIV
export HCCL_CONNECT_TIMEOUT=120
export HCCL_EXEC_TIMEOUT=204
export ACL_OP_INIT_MODE=1
export ASCEND_CONNECT_TIMEOUT=10000
export ASCEND_TRANSFER_TIMEOUT=10000
MOONCAKE_LIB="$(python3 -c 'import os, mooncake; print(os.path.dirname(mooncake.__file__))' 2>/dev/null || true)"
export LD_LIBRARY_PATH="${MOONCAKE_LIB}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# prefill-27 DP rank 0 (prefill): devices 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15, http 8100, kv ports 36000-36015, engine prefill-27
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start prefill-27-dp0 env ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 HCCL_BUFFSIZE=256 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.44 \
    --port 8100 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 16 \
    --max-model-len 25600 \
    --max-num-batched-tokens 16384 \
    --max-num-seqs 8 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --enforce-eager \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_producer","kv_port":36000,"engine_id":"prefill-27","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}},"abort_timeout_s":480}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'
