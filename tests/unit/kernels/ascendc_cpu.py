"""ctypes bridge to the CPU verification build of kernels_ascendc: plan a tiling, run a kernel on host tensors.

The library is built (incrementally) with cmake into kernels_ascendc/build-cpu the first time it is needed.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import torch

SOURCE_DIR = Path(__file__).resolve().parents[3] / "kernels_ascendc"
BUILD_DIR = SOURCE_DIR / "build-cpu"
LIBRARY = BUILD_DIR / "libkv_kernels_cpu.so"
ATLAS_A2_VECTOR_CORES = 40


class KvTiling(ctypes.Structure):
    """Mirror of kernels_ascendc/include/kv_tiling.h."""

    _fields_ = [("srcBlocks", ctypes.c_uint64), ("dstBlocks", ctypes.c_uint64), ("idBlocks", ctypes.c_uint64)] + [
        (name, ctypes.c_uint32) for name in (
            "numIds", "usedCores", "idsPerCore", "tokens", "tileTokens", "bufferBytes", "bufferNum", "aligned",
            "srcRowElems", "dstRowElems", "copyElems", "srcColumn", "dstColumn", "pieces", "fullLoad")]


class TilingRejected(ValueError):
    """The host tiling refused the shape, or the host check refused the launch (block ids, core count)."""


class HardwareRuleViolation(RuntimeError):
    """The AscendC stand-in caught something the hardware would reject."""


def build_library() -> Path:
    subprocess.run(["cmake", "-S", str(SOURCE_DIR), "-B", str(BUILD_DIR), "-DRUN_MODE=cpu"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(BUILD_DIR), "-j", "2"], check=True, stdout=subprocess.DEVNULL)
    return LIBRARY


class StandIn:
    """The KV kernels running on the AscendC stand-in, with the same arguments as ascend_pd.kernels."""

    def __init__(self, library: Path, vector_cores: int = ATLAS_A2_VECTOR_CORES):
        self.lib = ctypes.CDLL(str(library))
        self.lib.kvk_plan.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32,
                                      ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(KvTiling), ctypes.c_char_p,
                                      ctypes.c_uint32]
        self.lib.kvk_run.argtypes = [ctypes.c_char_p, ctypes.POINTER(KvTiling), ctypes.c_uint32, ctypes.c_uint32] + [
            ctypes.c_void_p] * 4 + [ctypes.c_char_p, ctypes.c_uint32]
        self.lib.kvk_workspace_bytes.argtypes = [ctypes.POINTER(KvTiling), ctypes.c_uint32]
        self.lib.kvk_workspace_bytes.restype = ctypes.c_uint64
        assert self.lib.kvk_tiling_size() == ctypes.sizeof(KvTiling), "KvTiling mirror is out of date"
        self.ub_bytes = self.lib.kvk_ub_bytes()
        self.vector_cores = vector_cores

    def plan(self, op: str, *shape: int) -> KvTiling:
        tiling, error = KvTiling(), ctypes.create_string_buffer(512)
        args = (ctypes.c_uint64 * len(shape))(*shape)
        code = self.lib.kvk_plan(op.encode(), args, len(shape), self.vector_cores, self.ub_bytes,
                                 ctypes.byref(tiling), error, len(error))
        if code:
            raise TilingRejected(error.value.decode())
        return tiling

    def run(self, op: str, tiling: KvTiling, elem_bytes: int, *tensors: torch.Tensor) -> None:
        pointers = [t.data_ptr() if t is not None else None for t in tensors] + [None] * (4 - len(tensors))
        error = ctypes.create_string_buffer(512)
        code = self.lib.kvk_run(op.encode(), ctypes.byref(tiling), elem_bytes, self.vector_cores, *pointers, error,
                                len(error))
        if code == 2:
            raise HardwareRuleViolation(error.value.decode())
        if code == 1:
            raise TilingRejected(error.value.decode())
        if code:
            raise RuntimeError(error.value.decode())

    # --- the ops, shaped like ascend_pd.kernels ------------------------------------------------------------------
    def gather_heads(self, cache, block_ids, head_start, head_count, tiling=None):
        nb, bs, heads, dim = cache.shape
        ids = _ids(block_ids)
        tiling = tiling or self.plan("gather_heads", nb, bs, heads, dim, cache.element_size(), len(ids), head_start,
                                     head_count)
        packed = torch.empty((len(ids), bs, head_count, dim), dtype=cache.dtype)
        self.run("gather_heads", tiling, cache.element_size(), cache, ids, packed)
        return packed

    def scatter_heads(self, cache, block_ids, head_start, packed, tiling=None):
        nb, bs, heads, dim = cache.shape
        ids = _ids(block_ids)
        tiling = tiling or self.plan("scatter_heads", nb, bs, heads, dim, cache.element_size(), len(ids),
                                     head_start, packed.shape[2])
        self.run("scatter_heads", tiling, cache.element_size(), cache, ids, packed.contiguous())

    def block_transpose(self, cache, block_ids, split, tiling=None):
        nb, bs, heads, dim = cache.shape
        ids = _ids(block_ids)
        tiling = tiling or self.plan("block_transpose", nb, bs, heads, dim, cache.element_size(), len(ids), split)
        workspace = torch.empty(self.lib.kvk_workspace_bytes(ctypes.byref(tiling), cache.element_size()),
                                dtype=torch.uint8)
        self.run("block_transpose", tiling, cache.element_size(), cache, ids, workspace)
        return tiling

    def mla_split(self, fused, block_ids, rope_dim):
        nb, bs, width = fused.shape
        ids = _ids(block_ids)
        tiling = self.plan("mla_split", nb, bs, width - rope_dim, rope_dim, fused.element_size(), len(ids))
        nope = torch.empty((len(ids), bs, 1, width - rope_dim), dtype=fused.dtype)
        rope = torch.empty((len(ids), bs, 1, rope_dim), dtype=fused.dtype)
        self.run("mla_split", tiling, fused.element_size(), fused, ids, nope, rope)
        return nope, rope

    def mla_fuse(self, nope, rope, block_ids):
        nb, bs, _, lora = nope.shape
        ids = _ids(block_ids)
        tiling = self.plan("mla_fuse", nb, bs, lora, rope.shape[3], nope.element_size(), len(ids))
        fused = torch.empty((len(ids), bs, lora + rope.shape[3]), dtype=nope.dtype)
        self.run("mla_fuse", tiling, nope.element_size(), nope, rope, ids, fused)
        return fused

    def nd_to_nz(self, cache, block_ids):
        nb, bs, heads, dim = cache.shape
        ids = _ids(block_ids)
        tiling = self.plan("nd_to_nz", nb, bs, heads * dim, cache.element_size(), len(ids))
        c0 = 32 // cache.element_size()
        nz = torch.empty((len(ids), heads * dim // c0, bs, c0), dtype=cache.dtype)
        self.run("nd_to_nz", tiling, cache.element_size(), cache, ids, nz)
        return nz

    def nz_to_nd(self, nz_cache, block_ids, head_dim):
        nb, fractals, bs, c0 = nz_cache.shape
        ids = _ids(block_ids)
        tiling = self.plan("nz_to_nd", nb, bs, fractals * c0, nz_cache.element_size(), len(ids))
        nd = torch.empty((len(ids), bs, fractals * c0 // head_dim, head_dim), dtype=nz_cache.dtype)
        self.run("nz_to_nd", tiling, nz_cache.element_size(), nz_cache, ids, nd)
        return nd


def _ids(block_ids) -> torch.Tensor:
    return torch.as_tensor(list(block_ids), dtype=torch.int32)
