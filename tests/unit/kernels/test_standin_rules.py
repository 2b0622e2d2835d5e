"""Each hardware rule of the AscendC stand-in, broken on purpose by a small kernel (cpu/standin_selftest.cpp)."""

from __future__ import annotations

import subprocess

import pytest


def run_case(library, case: str) -> subprocess.CompletedProcess:
    selftest = library.parent / "standin_selftest"
    return subprocess.run([str(selftest), case], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case,message", [
    ("copy_out_without_dequeue", "not EnQue'd and DeQue'd"),
    ("alloc_more_than_initbuffer", "all 1 buffers of the queue are in use"),
    ("dequeue_empty_queue", "DeQue from an empty queue"),
    ("block_count_over_4095", "blockCount = 4096 is outside [1, 4095]"),
    ("datacopy_unaligned_ub_address", "UB address 16 is not a multiple of 32 bytes"),
    ("datacopy_unaligned_gm_address", "GM address"),
    ("read_back_without_barrier", "without a barrier"),
    ("pad_bytes_are_poisoned", "poison"),
])
def test_the_standin_catches(standin_library, case, message):
    result = run_case(standin_library, case)
    assert result.returncode == 0, result.stdout + result.stderr
    assert message in result.stdout


def test_reading_back_after_a_barrier_is_allowed(standin_library):
    result = run_case(standin_library, "read_back_after_barrier")
    assert (result.returncode, result.stdout.strip()) == (1, "not caught")
