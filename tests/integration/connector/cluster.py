"""Start prefill and decode connector workers as separate processes on 127.0.0.1 and collect what they report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from kv_data import global_planes, shard
from tests.ports import free_port_range

PEER = Path(__file__).with_name("peer.py")


def specs(tmp_path: Path, *, mode: str, p_tp: int, d_tp: int, num_kv_heads: int = 4, is_mla: bool = False,
          src_blocks=(3, 4, 5, 9, 10), dst_blocks=(7, 8, 2, 3, 4), **extra) -> tuple[list[dict], list[dict]]:
    p_port = free_port_range(p_tp + d_tp)
    d_port = p_port + p_tp
    common = dict(mode=mode, p_tp=p_tp, d_tp=d_tp, num_kv_heads=num_kv_heads, is_mla=is_mla, layers=3,
                  num_blocks=12, block_size=16, head_dim=64, wait_s=40, p_engine_id="prefill-0",
                  p_kv_port=p_port,
                  request=dict(id="req-1", transfer_id="xfer-1", src_blocks=list(src_blocks),
                               dst_blocks=list(dst_blocks)))
    common.update(extra.pop("common", {}))
    prefill = [dict(common, role="prefill", engine_id="prefill-0", kv_port=p_port, tp_rank=r, tp_size=p_tp,
                    out=str(tmp_path / f"p{r}.pt"), **extra.get("prefill", {})) for r in range(p_tp)]
    decode = [dict(common, role="decode", engine_id="decode-0", kv_port=d_port, tp_rank=r, tp_size=d_tp,
                   out=str(tmp_path / f"d{r}.pt"), **extra.get("decode", {})) for r in range(d_tp)]
    return prefill, decode


def start(spec: dict, tmp_path: Path) -> subprocess.Popen:
    path = tmp_path / (Path(spec["out"]).stem + ".json")
    path.write_text(json.dumps(spec))
    log = open(tmp_path / (Path(spec["out"]).stem + ".log"), "w")
    return subprocess.Popen([sys.executable, str(PEER), str(path)], stdout=log, stderr=subprocess.STDOUT)


def run(tmp_path: Path, prefill: list[dict], decode: list[dict], timeout_s: float = 90) -> tuple[list, list]:
    """Run every worker to its end; return the prefill and decode results (None for a process that died)."""
    procs = [start(spec, tmp_path) for spec in prefill + decode]
    try:
        for proc in procs:
            proc.wait(timeout=timeout_s)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    results = [torch.load(spec["out"], weights_only=False) if Path(spec["out"]).exists() else None
               for spec in prefill + decode]
    return results[:len(prefill)], results[len(prefill):]


def expected_decode_caches(spec: dict) -> dict[int, list[torch.Tensor]]:
    """Per layer, the planes a decode rank must hold: its head shard of each prefill block, sentinel elsewhere."""
    expected = {}
    for layer in range(spec["layers"]):
        planes = []
        for plane in global_planes(spec, layer):
            want = shard(plane, spec, spec["tp_rank"], spec["tp_size"])
            out = torch.full_like(want, -7)
            for src, dst in zip(spec["request"]["src_blocks"], spec["request"]["dst_blocks"]):
                out[dst] = want[src]
            planes.append(out)
        expected[layer] = planes
    return expected


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def log_of(tmp_path: Path, spec: dict) -> str:
    return (tmp_path / (Path(spec["out"]).stem + ".log")).read_text()
