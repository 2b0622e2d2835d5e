"""check_headers.sh: every kernel compiles against a header set and a wrong call (cpu/negative_control.cpp) does not.

The stand-in run is always possible; the real AscendC headers only where a toolkit is installed (ASCEND_HOME_PATH).
"""

from __future__ import annotations

import os
import subprocess

import pytest

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


@pytest.mark.skipif(not os.environ.get("ASCEND_HOME_PATH"), reason="no AscendC toolkit installed")
def test_every_kernel_compiles_against_the_real_ascendc_headers():
    result = check(os.environ["ASCEND_HOME_PATH"])
    if result.returncode == 77:
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stdout + result.stderr
