#!/usr/bin/env bash
# Build the KV layout kernels for an Ascend NPU into build-npu/libascend_pd_ops.so.
# Needs: the CANN toolkit (source <CANN>/set_env.sh), torch and torch_npu in the active Python, cmake >= 3.16.
# Usage: SOC_VERSION=Ascend910B1 ./build_npu.sh      (Ascend910B1..B4: Atlas A2; Ascend910_93xx: Atlas A3)
set -euo pipefail
cd "$(dirname "$0")"
: "${ASCEND_HOME_PATH:?source <CANN install>/set_env.sh first}"
: "${SOC_VERSION:?set SOC_VERSION, e.g. Ascend910B1 (Atlas A2) or Ascend910_9391 (Atlas A3); see README.md}"
# every kernel against this toolkit's own headers first (check_headers.sh; 77: its CPU debug headers are missing)
status=0
./check_headers.sh "${ASCEND_HOME_PATH}" || status=$?
if [ "$status" = 77 ]; then
    echo "warning: kernels not checked against the toolkit headers (no tools/tikicpulib in ${ASCEND_HOME_PATH})" >&2
elif [ "$status" != 0 ]; then
    exit "$status"
fi
cmake -S . -B build-npu -DRUN_MODE=npu -DSOC_VERSION="${SOC_VERSION}" -DPython3_EXECUTABLE="$(command -v python3)"
cmake --build build-npu -j "$(nproc)"
echo "built $(pwd)/build-npu/libascend_pd_ops.so"
echo "ascend_pd.kernels loads it from there, or from \$ASCEND_PD_KERNELS_LIB"
