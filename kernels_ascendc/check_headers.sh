#!/usr/bin/env bash
# Compiles every kernel (syntax only, the host compiler) against a set of AscendC headers, then a wrong call that
# must not compile (cpu/negative_control.cpp), so a header set that accepts anything cannot pass.
# Usage:
#   ./check_headers.sh                 the real headers of the toolkit at $ASCEND_HOME_PATH
#   ./check_headers.sh <toolkit root>  the real headers of another install
#   ./check_headers.sh --standin       the CPU stand-in (cpu/kernel_operator.h), as CI does
# The real headers are read the way the toolkit's CPU debug mode reads them (ASCENDC_CPU_DEBUG, include paths of
# its CMakeASCInformation.cmake); they need tools/tikicpulib, which only an installed toolkit has.
# Exit: 0 all kernels compile and the wrong call is rejected; 1 otherwise; 77 no real headers to check against.
set -uo pipefail
cd "$(dirname "$0")"
CXX=${CXX:-g++}
NEGATIVE=${NEGATIVE_CONTROL:-cpu/negative_control.cpp}
target=${1:-${ASCEND_HOME_PATH:-}}

if [ "$target" = "--standin" ]; then
    label="the CPU stand-in (cpu/kernel_operator.h)"
    flags=(-std=c++17 -DASCEND_PD_CPU_STANDIN=1 -Icpu)
else
    if [ -z "$target" ] || [ ! -f "$target/tools/tikicpulib/lib/include/tikicpulib.h" ]; then
        echo "no AscendC toolkit headers at '${target}' (tools/tikicpulib/lib/include/tikicpulib.h): not checked" >&2
        exit 77
    fi
    label="the AscendC headers of $target"
    flags=(-std=c++17 -D__NPU_ARCH__=2201 -DASCENDC_CPU_DEBUG=1 -D_GLIBCXX_USE_CXX11_ABI=0)
    for dir in tools/tikicpulib/lib/include include asc/include asc/include/basic_api asc/include/interface \
               asc/include/utils asc/impl/basic_api asc/impl/utils compiler/tikcpp/tikcfw \
               compiler/tikcpp/tikcfw/impl compiler/tikcpp/tikcfw/interface; do
        [ -d "$target/$dir" ] && flags+=(-isystem "$target/$dir")
    done
fi
flags+=(-Iinclude -Ihost -fsyntax-only)

failed=0
for kernel in kernels/*.cpp; do
    if "$CXX" "${flags[@]}" "$kernel"; then
        echo "ok      $kernel"
    else
        echo "FAILED  $kernel"
        failed=1
    fi
done
if "$CXX" "${flags[@]}" "$NEGATIVE" 2>/dev/null; then
    echo "FAILED  $NEGATIVE compiled: these headers accept a call the real API rejects"
    failed=1
else
    echo "ok      $NEGATIVE rejected"
fi
[ "$failed" = 0 ] && echo "every kernel compiles against $label"
exit "$failed"
