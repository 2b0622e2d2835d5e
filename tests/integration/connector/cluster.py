"""Start prefill and decode connector workers as separate processes on 127.0.0.1 and collect what they report."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import torch

import peer
from kv_data import global_planes, shard
from tests.ports import free_port_range

# A peer would spend over a second of CPU importing torch and the connector: each forks from a server process that
# has imported them (and nothing more) once. The server starts with the first peer, in the environment of then (the
# session's KV secret), which every peer inherits.
PEERS = multiprocessing.get_context("forkserver")
PEERS.set_forkserver_preload(["torch", "ascend_pd.connector.worker"])


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


def start(spec: dict, tmp_path: Path) -> multiprocessing.Process:
    path = tmp_path / (Path(spec["out"]).stem + ".json")
    path.write_text(json.dumps(spec))
    log = path.with_suffix(".log")
    proc = PEERS.Process(target=peer.run_logged, args=(str(path), str(log)), name=str(log))
    proc.start()
    return proc


def run(tmp_path: Path, prefill: list[dict], decode: list[dict], timeout_s: float = 90,
        wait_for_prefill: bool = True) -> tuple[list, list]:
    """Run the workers; return the prefill and decode results (None for a process that died before it reported).
    A test that asserts nothing on prefill passes wait_for_prefill=False: its prefill workers are killed once every
    decode worker has ended (the prefill of a request D gave up on holds it until its own timeout)."""
    procs = [start(spec, tmp_path) for spec in prefill + decode]
    try:
        for proc in procs if wait_for_prefill else procs[len(prefill):]:
            proc.join(timeout_s)
            if proc.exitcode is None:
                raise TimeoutError(f"the peer logging to {proc.name} still runs after {timeout_s} s")
    finally:
        for proc in procs:
            if proc.exitcode is None:
                proc.kill()
                proc.join()
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
