"""kv_transfer_config for one engine: this project's AscendPDConnector or vllm-ascend's Mooncake connectors."""

from __future__ import annotations

from typing import Any

from ascend_pd.deploy import Deployment, Instance

KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
# vllm-ascend registers these names itself: the pull connector reads from P, the layerwise one pushes from P.
VLLM_ASCEND_CONNECTORS = {"pull": "MooncakeConnectorV1", "push": "MooncakeLayerwiseConnector"}
# vLLM's KVTransferConfig fails a request whose KV load failed unless told to recompute it ("fail" is its default).
# Both connectors report failed loads as load errors, and vllm-ascend accepts "recompute" except for hybrid (Mamba)
# models, which the model catalog does not hold.
LOAD_FAILURE_POLICY = "recompute"
# Seconds P keeps the blocks of a finished request that no decode instance has read (vllm-ascend's guides use 480).
KV_ABORT_TIMEOUT_S = 480


def _shape(instance: Instance, with_pp: bool) -> dict[str, int]:
    shape = {"tp_size": instance.parallel.tp, "dp_size": instance.parallel.dp}
    if with_pp and instance.parallel.pp > 1:
        shape["pp_size"] = instance.parallel.pp
    return shape


def _role_shapes(deployment: Deployment, instance: Instance, with_pp: bool) -> dict[str, dict[str, int]]:
    """This instance's own shape under its role, and the first instance of the other role for the peer side.
    vllm-ascend needs one shape per role (validation enforces it); AscendPDConnector takes the peer's TP size of
    each request from kv_transfer_params, so the peer entry here is only its default."""
    other_role = "decode" if instance.role == "prefill" else "prefill"
    peer = next((i for i in deployment.instances if i.role == other_role), None)
    shapes = {instance.role: _shape(instance, with_pp)}
    if peer is not None:
        shapes[other_role] = _shape(peer, with_pp)
    return {role: shapes[role] for role in ("prefill", "decode") if role in shapes}


def kv_transfer_config(deployment: Deployment, instance: Instance, *, engine_id: str,
                       kv_port: int) -> dict[str, Any] | None:
    """The --kv-transfer-config of one engine (None for a colocated instance, which moves no KV).

    `engine_id` and `kv_port` are the engine's own: an engine that vLLM runs as one rank of a DP group gets the
    instance's values (vLLM appends _dp<rank> and the connector adds dp_rank * tp); a stand-alone engine serving
    one DP rank of a dense model gets them already offset."""
    if instance.role not in KV_ROLES:
        return None
    connector = deployment.connector
    if connector.implementation == "ascend-pd":
        extra = {"mode": connector.mode, "protocol": connector.protocol,
                 **_role_shapes(deployment, instance, with_pp=False)}
        if instance.role == "prefill":
            extra["abort_timeout_s"] = KV_ABORT_TIMEOUT_S  # AscendPDConnector reads no environment variable for it
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
        "kv_connector_extra_config": _role_shapes(deployment, instance, with_pp=True),
    }
