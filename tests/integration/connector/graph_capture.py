"""vllm-ascend's graph capture and warm-up, replayed on the NPU twin against connectors vLLM builds.

Run as `python graph_capture.py MODEL_DIR BASE_PORT` (it binds BASE_PORT .. BASE_PORT + 4); prints one JSON line
per (mode, role) with what each hook did.

vllm-ascend captures FULL_DECODE_ONLY graphs with attention metadata built for dummy batches
(`model_runner_v1.py` `_should_build_dummy_attn_metadata`) and no connector metadata bound; its MLA, SFA, DSA and
GDN layers call `maybe_save_kv_layer_to_connector` (`attention/utils.py`), which checks only that the attention
metadata is not None (read at main 182b75e, v0.23.0, v0.25.1rc1). The replay below makes the same calls.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "connector"))

import torch_npu_twin  # noqa: E402
from vllm_scheduler import vllm_config  # noqa: E402

DEVICE = 1
LAYERS = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")


def maybe_save_kv_layer_to_connector(connector, layer_name: str, kv_cache, attn_metadata) -> None:
    """vllm_ascend/attention/utils.py: a v1 KV connector is present and attn_metadata is not None; nothing else."""
    if attn_metadata is None:
        return
    connector.save_kv_layer(layer_name, kv_cache, attn_metadata)


def capture(connector, caches: dict) -> None:
    """One captured decode graph (several batch sizes in vLLM; one suffices): every attention layer saves, then the
    model runner's connector context waits for the saves; no get_finished call is bound to a step either."""
    dummy_attn_metadata = object()
    for layer in LAYERS:
        connector.wait_for_layer_load(layer)
        maybe_save_kv_layer_to_connector(connector, layer, caches[layer], dummy_attn_metadata)
    connector.wait_for_save()


def main(model_dir: str, base_port: int) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment

    from ascend_pd.connector.metadata import AscendPDMetadata

    torch_npu_twin.install()
    torch.npu.set_device(DEVICE)  # the worker's thread, bound to its NPU, as vllm-ascend's worker does
    with set_current_vllm_config(vllm_config(Path(model_dir), role="kv_producer", mode="pull")):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{base_port}")
        ensure_model_parallel_initialized(1, 1)
    port = base_port + 1
    for mode in ("pull", "push"):
        for role in ("kv_producer", "kv_consumer"):
            config = vllm_config(Path(model_dir), role=role, mode=mode)
            config.kv_transfer_config.kv_port = port
            port += 1
            connector = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, None)
            # vLLM's CPU attention layout, [num_blocks, kv_heads, block_size, 2 * head_size], on the twin's device
            caches = {layer: torch_npu_twin.place(torch.zeros(8, 2, 16, 64, dtype=torch.bfloat16), DEVICE)
                      for layer in LAYERS}
            try:
                connector.register_kv_caches(caches)
                capture(connector, caches)
                after_capture = connector.get_finished(set())
                # the first real step after capture still takes its metadata
                connector.bind_connector_metadata(AscendPDMetadata(held={"r": 30.0} if role == "kv_producer" else {}))
                connector.start_load_kv(None)
                connector.wait_for_save()
                connector.clear_connector_metadata()
                print(json.dumps({"mode": mode, "role": role, "captured": True,
                                  "finished_after_capture": [sorted(s or ()) for s in after_capture],
                                  "queued_device_work": torch_npu_twin.pending()}), flush=True)
            finally:
                connector.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
