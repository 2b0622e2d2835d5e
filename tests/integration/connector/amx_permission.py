"""In a fresh process: whether it may run AMX tile instructions before and after vLLM's factory builds a decode
worker's AscendPDConnector (one JSON line). Run by test_vllm_loading.py with a base port: it binds it and the next."""

from __future__ import annotations

import ctypes
import json
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "connector"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from vllm_scheduler import vllm_config  # noqa: E402


_SYS_ARCH_PRCTL = 158  # on x86-64 only
_ARCH_GET_XCOMP_PERM = 0x1022
_XFEATURE_XTILEDATA = 18


def amx_permitted() -> bool:
    """Whether this process may run AMX tile instructions now (False off x86-64 Linux)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False  # the syscall number is x86-64's
    bits = ctypes.c_uint64(0)
    if ctypes.CDLL(None, use_errno=True).syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_PERM, ctypes.byref(bits)) != 0:
        return False
    return bool(bits.value >> _XFEATURE_XTILEDATA & 1)


def main(model_dir: str, base_port: int) -> None:
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.parallel_state import ensure_model_parallel_initialized, init_distributed_environment

    before = amx_permitted()
    config = vllm_config(Path(model_dir), role="kv_consumer", mode="pull")
    config.kv_transfer_config.kv_port = base_port + 1
    with set_current_vllm_config(config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{base_port}")
        ensure_model_parallel_initialized(1, 1)
    connector = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, None)
    try:
        print(json.dumps({"before": before, "after": amx_permitted()}), flush=True)
    finally:
        connector.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
