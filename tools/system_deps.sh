#!/usr/bin/env bash
# The Debian/Ubuntu packages `make test` needs, checked before anything else. Run as root with apt-get (as CI
# does), it installs what is missing; otherwise it prints the one command that does and stops.
set -euo pipefail

missing=()
need_command() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_command shellcheck shellcheck     # the rendered launch scripts are linted
need_command cmake cmake               # the CPU build of the AscendC kernels
need_command g++ g++
need_command make make
need_command ip iproute2               # network namespaces for the unreachable-peer cases
need_command iptables iptables         # dropping a peer's traffic in them
ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1' || missing+=(libibverbs1)  # Mooncake's library loads it
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    exit 0
fi
echo "make test needs these Debian packages first: sudo apt-get install -y ${missing[*]}" >&2
exit 1
