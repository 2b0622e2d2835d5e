"""kv_transfer_config for one engine: this project's AscendPDConnector or vllm-ascend's Mooncake connectors."""

from __future__ import annotations

from typing import Any

from ascend_pd.deploy import Deployment, Instance
from ascend_pd.deploy.handoff import ABORT_TIMEOUT_S, SHAPES_KEY
from ascend_pd.deploy.layout import runs_external_dp

KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
# vllm-ascend registers these names itself: the pull connector reads from P, the layerwise one pushes from P.
VLLM_ASCEND_CONNECTORS = {"pull": "MooncakeConnectorV1", "push": "MooncakeLayerwiseConnector"}
# vLLM's KVTransferConfig fails a request whose KV load failed unless told to recompute it ("fail" is its default).
# Both connectors report failed loads as load errors, and vllm-ascend accepts "recompute" except for hybrid (Mamba)
# models, which the model catalog does not hold.
LOAD_FAILURE_POLICY = "recompute"


def engine_data_parallel_size(instance: Instance, moe: bool) -> int:
    """vLLM's data_parallel_size of one of the instance's engines: a MoE instance runs its DP ranks as one vLLM DP
    group; a dense model's DP ranks are independent engines of DP 1 each (deploy/layout.py)."""
    return instance.parallel.dp if runs_external_dp(instance, moe) else 1


def _shape(instance: Instance, dp_size: int, with_pp: bool) -> dict[str, int]:
    shape = {"tp_size": instance.parallel.tp, "dp_size": dp_size}
    if with_pp and instance.parallel.pp > 1:
        shape["pp_size"] = instance.parallel.pp
    return shape


def _role_shapes(deployment: Deployment, instance: Instance, *, engine_level: bool, moe: bool,
                 with_pp: bool) -> dict[str, dict[str, int]]:
    """This instance's own shape under its role, and the first instance of the other role for the peer side.

    `engine_level` writes each side's DP as vLLM sees it in one engine, which vllm-ascend's start-up check demands of
    the own role (utils.check_kv_extra_config); otherwise the instance's DP ranks. vllm-ascend's connectors need one
    shape per role (validation enforces it); AscendPDConnector checks each request's peer TP against its entry."""
    other_role = "decode" if instance.role == "prefill" else "prefill"
    peer = next((i for i in deployment.instances if i.role == other_role), None)

    def shape(of: Instance) -> dict[str, int]:
        return _shape(of, engine_data_parallel_size(of, moe) if engine_level else of.parallel.dp, with_pp)

    shapes = {instance.role: shape(instance)}
    if peer is not None:
        shapes[other_role] = shape(peer)
    return {role: shapes[role] for role in ("prefill", "decode") if role in shapes}


def kv_transfer_config(deployment: Deployment, instance: Instance, *, engine_id: str, kv_port: int,
                       moe: bool = False, rank_hosts: list[str] | None = None) -> dict[str, Any] | None:
    """The --kv-transfer-config of one engine (None for a colocated instance, which moves no KV).

    `engine_id` and `kv_port` are the engine's own: an engine that vLLM runs as one rank of a DP group gets the
    instance's values (vLLM appends _dp<rank> and the connector adds dp_rank * tp); a stand-alone engine serving
    one DP rank of a dense model gets them already offset. `moe` says whether the instance's DP ranks form one vLLM
    DP group. `rank_hosts` lists the host of each TP rank of an engine whose ranks span nodes: a prefill engine
    hands it to D with its blocks (vllm-ascend's connectors gather theirs from the workers)."""
    if instance.role not in KV_ROLES:
        return None
    connector = deployment.connector
    if connector.implementation == "ascend-pd":
        # No top-level prefill/decode keys: vllm-ascend checks those against the engine's own TP and DP, and for a
        # GQA model asserts prefill TP % decode TP == 0 whatever the connector (ascend_config.AscendConfig).
        extra = {"mode": connector.mode, "protocol": connector.protocol,
                 SHAPES_KEY: _role_shapes(deployment, instance, engine_level=False, moe=moe, with_pp=False)}
        if instance.role == "prefill":
            extra["abort_timeout_s"] = ABORT_TIMEOUT_S  # AscendPDConnector reads no environment variable for it
            if rank_hosts and len(set(rank_hosts)) > 1:
                extra["rank_hosts"] = rank_hosts
        return {
            "kv_connector": "AscendPDConnector",
            "kv_connector_module_path": "ascend_pd.connector",
            "kv_role": KV_ROLES[instance.role],
            "kv_port": kv_port,
            "engine_id": engine_id,
            "kv_load_failure_policy": LOAD_FAILURE_POLICY,
            "kv_connector_extra_config": extra,
        }
    return {
        "kv_connector": VLLM_ASCEND_CONNECTORS[connector.mode],
        "kv_role": KV_ROLES[instance.role],
        "kv_port": kv_port,
        "engine_id": engine_id,
        "kv_load_failure_policy": LOAD_FAILURE_POLICY,
        "kv_connector_extra_config": _role_shapes(deployment, instance, engine_level=True, moe=moe, with_pp=True),
    }
