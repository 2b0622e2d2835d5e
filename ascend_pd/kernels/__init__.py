"""KV layout conversion ops for PD transfer: head-slice gather/scatter, block transpose, MLA split/fuse, ND <-> NZ.

Torch is imported only when an op is first used, so `ascend_pd.kernels.tp_mapping` works without it.
"""

from __future__ import annotations

import importlib

from ascend_pd.kernels.tp_mapping import (DestinationPlan, HeadRange, ReadGroup, SourceRead, TpTransferPlan,
                                          plan_tp_transfer)

_OPS = ("gather_heads", "scatter_heads", "block_transpose", "mla_split", "mla_fuse", "nd_to_nz", "nz_to_nd")

__all__ = [*_OPS, "plan_tp_transfer", "TpTransferPlan", "DestinationPlan", "ReadGroup", "SourceRead", "HeadRange"]


def __getattr__(name: str):
    if name in _OPS:
        return getattr(importlib.import_module("ascend_pd.kernels.ops"), name)
    raise AttributeError(f"module 'ascend_pd.kernels' has no attribute {name!r}")
