#!/usr/bin/env bash
# Start every serving process of deployment 'deepseek-r1-cloudmatrix384-x2' on node cm0-n00, or only the processes named as arguments.
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

# Node cm0-n00: host 192.168.16.11, interface enp189s0f0.
export VLLM_HOST_IP=192.168.16.11
export GLOO_SOCKET_IFNAME=enp189s0f0
export HCCL_IF_IP=192.168.16.11
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

# decode-0 DP rank 0 (decode): devices 0, http 8100, kv ports 36000, engine decode-0_dp0
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp0 env ASCEND_RT_VISIBLE_DEVICES=0 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8100 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 0 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 1 (decode): devices 1, http 8101, kv ports 36001, engine decode-0_dp1
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp1 env ASCEND_RT_VISIBLE_DEVICES=1 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8101 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 1 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 2 (decode): devices 2, http 8102, kv ports 36002, engine decode-0_dp2
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp2 env ASCEND_RT_VISIBLE_DEVICES=2 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8102 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 2 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 3 (decode): devices 3, http 8103, kv ports 36003, engine decode-0_dp3
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp3 env ASCEND_RT_VISIBLE_DEVICES=3 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8103 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 3 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 4 (decode): devices 4, http 8104, kv ports 36004, engine decode-0_dp4
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp4 env ASCEND_RT_VISIBLE_DEVICES=4 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8104 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 4 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 5 (decode): devices 5, http 8105, kv ports 36005, engine decode-0_dp5
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp5 env ASCEND_RT_VISIBLE_DEVICES=5 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8105 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 5 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 6 (decode): devices 6, http 8106, kv ports 36006, engine decode-0_dp6
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp6 env ASCEND_RT_VISIBLE_DEVICES=6 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8106 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 6 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 7 (decode): devices 7, http 8107, kv ports 36007, engine decode-0_dp7
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp7 env ASCEND_RT_VISIBLE_DEVICES=7 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8107 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 7 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 8 (decode): devices 8, http 8108, kv ports 36008, engine decode-0_dp8
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp8 env ASCEND_RT_VISIBLE_DEVICES=8 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8108 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 8 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 9 (decode): devices 9, http 8109, kv ports 36009, engine decode-0_dp9
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp9 env ASCEND_RT_VISIBLE_DEVICES=9 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8109 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 9 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 10 (decode): devices 10, http 8110, kv ports 36010, engine decode-0_dp10
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp10 env ASCEND_RT_VISIBLE_DEVICES=10 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8110 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 10 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 11 (decode): devices 11, http 8111, kv ports 36011, engine decode-0_dp11
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp11 env ASCEND_RT_VISIBLE_DEVICES=11 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8111 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 11 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 12 (decode): devices 12, http 8112, kv ports 36012, engine decode-0_dp12
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp12 env ASCEND_RT_VISIBLE_DEVICES=12 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8112 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 12 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 13 (decode): devices 13, http 8113, kv ports 36013, engine decode-0_dp13
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp13 env ASCEND_RT_VISIBLE_DEVICES=13 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8113 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 13 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 14 (decode): devices 14, http 8114, kv ports 36014, engine decode-0_dp14
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp14 env ASCEND_RT_VISIBLE_DEVICES=14 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8114 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 14 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'

# decode-0 DP rank 15 (decode): devices 15, http 8115, kv ports 36015, engine decode-0_dp15
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp15 env ASCEND_RT_VISIBLE_DEVICES=15 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.11 \
    --port 8115 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 15 \
    --data-parallel-address 192.168.16.11 \
    --data-parallel-rpc-port 18100 \
    --enable-expert-parallel \
    --max-model-len 25600 \
    --max-num-batched-tokens 256 \
    --max-num-seqs 37 \
    --gpu-memory-utilization 0.9 \
    --block-size 128 \
    --trust-remote-code \
    --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY"}' \
    --quantization ascend \
    --kv-transfer-config '{"kv_connector":"AscendPDConnector","kv_connector_module_path":"ascend_pd.connector","kv_role":"kv_consumer","kv_port":36000,"engine_id":"decode-0","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"mode":"push","protocol":"ascend","ascend_pd_shapes":{"prefill":{"tp_size":16,"dp_size":1},"decode":{"tp_size":1,"dp_size":32}}}}' \
    --additional-config '{}' \
    --speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'
