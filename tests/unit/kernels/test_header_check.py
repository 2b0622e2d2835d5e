"""check_headers.sh: every kernel compiles against a header set and a wrong call (cpu/negative_control.cpp) does not.

The stand-in run is always possible. The real AscendC headers exist only where a toolkit is installed; there
build_npu.sh runs the check (kernels_ascendc/README.md), and here the script must say it checked nothing rather than
pass.
"""

from __future__ import annotations

import os
import subprocess

from ascendc_cpu import SOURCE_DIR

SCRIPT = SOURCE_DIR / "check_headers.sh"


def check(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_every_kernel_compiles_against_the_standin_and_the_wrong_call_does_not():
    result = check("--standin")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok      kernels/") == len(list((SOURCE_DIR / "kernels").glob("*.cpp")))
    assert "cpu/negative_control.cpp rejected" in result.stdout


def test_the_check_fails_when_the_negative_control_compiles():
    result = check("--standin", NEGATIVE_CONTROL="kernels/gather_heads.cpp")
    assert result.returncode == 1
    assert "accept a call the real API rejects" in result.stdout


def test_without_toolkit_headers_the_check_says_not_checked_instead_of_passing(tmp_path):
    result = check(str(tmp_path))
    assert result.returncode == 77
    assert "not checked" in result.stderr and str(tmp_path) in result.stderr
    assert "every kernel compiles" not in result.stdout
