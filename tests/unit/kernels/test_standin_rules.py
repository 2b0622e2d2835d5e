"""Each hardware rule of the AscendC stand-in, broken on purpose by a small kernel (cpu/standin_selftest.cpp).

Each rule has a twin case that keeps it (or uses what the real API allows) and must run clean, so a rule that
fires on everything would fail here too.
"""

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
    ("more_than_64_buffers_in_one_pipe", "80 buffers in one TPipe exceed the 64"),
    ("block_count_over_4095", "blockCount = 4096 is outside [0, 4095]"),
    ("datacopy_unaligned_ub_address", "UB address 16 is not a multiple of 32 bytes"),
    ("datacopy_length_not_whole_blocks", "length 48 is not a multiple of 32 bytes"),
    ("datacopy_gm_address_not_element_aligned", "not aligned to its 2-byte element"),
    ("read_back_without_barrier", "without a barrier"),
    ("read_back_after_mte3_barrier", "without a barrier"),
    ("read_back_after_mte2_barrier", "without a barrier"),
    ("read_back_with_flag_set_before_the_write", "without a barrier"),
    ("read_back_after_a_flag_of_another_event", "without a barrier"),
    ("wait_flag_without_set_flag", "WaitFlag without a SetFlag"),
    ("wait_flag_on_another_id", "WaitFlag without a SetFlag"),
    ("padding_wider_than_32_bytes", "at most 32 bytes"),
    ("kernel_without_type", "KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY)"),
    ("pad_bytes_are_poisoned", "poison"),
])
def test_the_standin_catches(standin_library, case, message):
    result = run_case(standin_library, case)
    assert result.returncode == 0, result.stdout + result.stderr
    assert message in result.stdout


@pytest.mark.parametrize("case", [
    "read_back_after_pipe_all_barrier",
    "read_back_after_mte3_mte2_flag",
    "zero_length_copies_are_no_ops",
    "datacopy_gm_address_element_aligned",
    "pad_value_fills_the_padding",
])
def test_what_the_hardware_allows_runs_clean(standin_library, case):
    result = run_case(standin_library, case)
    assert (result.returncode, result.stdout.strip()) == (1, "not caught"), result.stdout + result.stderr
