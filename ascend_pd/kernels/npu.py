"""Finds the AscendC ops (torch.ops.ascend_pd.*) when torch_npu is importable and the extension library is built."""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import torch

LIBRARY_ENV = "ASCEND_PD_KERNELS_LIB"
DEFAULT_LIBRARY = Path(__file__).resolve().parents[2] / "kernels_ascendc" / "build-npu" / "libascend_pd_ops.so"


@functools.cache
def ascendc_ops_loaded() -> bool:
    """Load the extension once; False (and the torch paths are used) when torch_npu or the library is missing."""
    if importlib.util.find_spec("torch_npu") is None:
        return False
    library = Path(os.environ.get(LIBRARY_ENV, DEFAULT_LIBRARY))
    if not library.is_file():
        return False
    import torch_npu  # noqa: F401  (registers the NPU device the ops are implemented for)

    torch.ops.load_library(str(library))
    return True


def use_ascendc(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "npu" and ascendc_ops_loaded()
