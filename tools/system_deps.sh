#!/usr/bin/env bash
# The Debian/Ubuntu packages the README's set-up commands need, checked before anything else: with the argument
# "venv" only what `python3 -m venv` needs (make plan), otherwise everything make test needs. Run as root with
# apt-get (as CI does), it installs what is missing; otherwise it prints the one command that does and stops.
set -euo pipefail

missing=()
need_command() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }

check_venv() {
    # venv needs ensurepip, which Debian's own Python ships in python3-venv
    "${PYTHON:-python3}" -m ensurepip --version >/dev/null 2>&1 || missing+=(python3-venv)
}

check_tests() {
    check_venv
    need_command shellcheck shellcheck     # the rendered launch scripts are linted
    need_command cmake cmake               # the CPU build of the AscendC kernels
    need_command g++ g++
    need_command make make
    need_command ip iproute2               # network namespaces for the unreachable-peer cases
    need_command iptables iptables         # dropping a peer's traffic in them
    ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1' || missing+=(libibverbs1)  # Mooncake's library loads it
}

if [ "${1:-}" = venv ]; then check_venv; else check_tests; fi

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
echo "first install these Debian packages: sudo apt-get install -y ${missing[*]}" >&2
exit 1
