#!/usr/bin/env bash
# Start every serving process of deployment 'deepseek-r1-cloudmatrix384' on node cm0-n01, or only the processes named as arguments.
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

# Node cm0-n01: host 192.168.16.12, interface enp189s0f0.
export VLLM_HOST_IP=192.168.16.12
export GLOO_SOCKET_IFNAME=enp189s0f0
export HCCL_IF_IP=192.168.16.12
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

# decode-0 DP rank 16 (decode): devices 0, http 8116, kv ports 36016, engine decode-0_dp16
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp16 env ASCEND_RT_VISIBLE_DEVICES=0 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8116 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 16 \
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

# decode-0 DP rank 17 (decode): devices 1, http 8117, kv ports 36017, engine decode-0_dp17
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp17 env ASCEND_RT_VISIBLE_DEVICES=1 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8117 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 17 \
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

# decode-0 DP rank 18 (decode): devices 2, http 8118, kv ports 36018, engine decode-0_dp18
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp18 env ASCEND_RT_VISIBLE_DEVICES=2 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8118 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 18 \
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

# decode-0 DP rank 19 (decode): devices 3, http 8119, kv ports 36019, engine decode-0_dp19
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp19 env ASCEND_RT_VISIBLE_DEVICES=3 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8119 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 19 \
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

# decode-0 DP rank 20 (decode): devices 4, http 8120, kv ports 36020, engine decode-0_dp20
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp20 env ASCEND_RT_VISIBLE_DEVICES=4 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8120 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 20 \
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

# decode-0 DP rank 21 (decode): devices 5, http 8121, kv ports 36021, engine decode-0_dp21
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp21 env ASCEND_RT_VISIBLE_DEVICES=5 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8121 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 21 \
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

# decode-0 DP rank 22 (decode): devices 6, http 8122, kv ports 36022, engine decode-0_dp22
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp22 env ASCEND_RT_VISIBLE_DEVICES=6 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8122 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 22 \
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

# decode-0 DP rank 23 (decode): devices 7, http 8123, kv ports 36023, engine decode-0_dp23
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp23 env ASCEND_RT_VISIBLE_DEVICES=7 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8123 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 23 \
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

# decode-0 DP rank 24 (decode): devices 8, http 8124, kv ports 36024, engine decode-0_dp24
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp24 env ASCEND_RT_VISIBLE_DEVICES=8 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8124 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 24 \
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

# decode-0 DP rank 25 (decode): devices 9, http 8125, kv ports 36025, engine decode-0_dp25
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp25 env ASCEND_RT_VISIBLE_DEVICES=9 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8125 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 25 \
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

# decode-0 DP rank 26 (decode): devices 10, http 8126, kv ports 36026, engine decode-0_dp26
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp26 env ASCEND_RT_VISIBLE_DEVICES=10 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8126 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 26 \
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

# decode-0 DP rank 27 (decode): devices 11, http 8127, kv ports 36027, engine decode-0_dp27
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp27 env ASCEND_RT_VISIBLE_DEVICES=11 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8127 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 27 \
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

# decode-0 DP rank 28 (decode): devices 12, http 8128, kv ports 36028, engine decode-0_dp28
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp28 env ASCEND_RT_VISIBLE_DEVICES=12 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8128 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 28 \
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

# decode-0 DP rank 29 (decode): devices 13, http 8129, kv ports 36029, engine decode-0_dp29
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp29 env ASCEND_RT_VISIBLE_DEVICES=13 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8129 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 29 \
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

# decode-0 DP rank 30 (decode): devices 14, http 8130, kv ports 36030, engine decode-0_dp30
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp30 env ASCEND_RT_VISIBLE_DEVICES=14 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8130 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 30 \
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

# decode-0 DP rank 31 (decode): devices 15, http 8131, kv ports 36031, engine decode-0_dp31
# prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): AscendPDConnector moves
# only the prompt blocks after D's prefix hits, and the proxy's prefix-affinity routing relies on them
start decode-0-dp31 env ASCEND_RT_VISIBLE_DEVICES=15 HCCL_BUFFSIZE=600 \
    vllm serve /models/deepseek-r1 \
    --host 192.168.16.12 \
    --port 8131 \
    --served-model-name deepseek-r1 \
    --tensor-parallel-size 1 \
    --data-parallel-size 32 \
    --data-parallel-rank 31 \
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
