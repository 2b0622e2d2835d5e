"""Turn a chosen plan into a Deployment: devices on the topology, ports, engine ids and vLLM arguments."""

from __future__ import annotations

import re

from ascend_pd.defaults import MODEL_ROOT, PROXY_POLICY, PROXY_PORT
from ascend_pd.deploy.rules.names import K8S_NAME_MAX, OBJECT_SUFFIXES
from ascend_pd.deploy.schema import (SLO, Connector, Deployment, DevicePlacement, Instance, Metadata, ModelRef,
                                     Parallel, Proxy, VllmArgs, Workload)
from ascend_pd.hardware import Cluster, Device, shipped_clusters
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.capacity import Option, Requirements
from ascend_pd.planner.modes import draft_args
from ascend_pd.planner.ports import HostPorts
from ascend_pd.planner.proxy_sizing import proxy_workers
from ascend_pd.planner.search import Choice

DECODE_MIN_BATCHED_TOKENS = 256
PREFILL_MAX_SEQS = 16


def _serving_groups(cluster: Cluster, units: int) -> list[list[Device]]:
    """Devices of each serving group in topology order (node by node), one group per SuperPoD if several."""
    if units > 1:
        return [[d for d in cluster.devices if d.superpod == pod] for pod in cluster.superpods[:units]]
    return [list(cluster.devices)]


def _placements(devices: list[Device], tp: int) -> list[DevicePlacement]:
    """One entry per DP rank of `tp` devices; instance sizes are powers of two placed at aligned offsets, so a
    rank never leaves its node (tp is at most a node's devices)."""
    return [DevicePlacement(node=devices[i].node, devices=[d.local_id for d in devices[i:i + tp]])
            for i in range(0, len(devices), tp)]


def vllm_args(cost: CostModel, option: Option, req: Requirements) -> VllmArgs:
    extra = draft_args(option.role, req.mtp)
    if option.role == "prefill":
        full_length = cost.memory(option.shape, role="prefill").kv_capacity_tokens // req.max_model_len
        return VllmArgs(max_model_len=req.max_model_len, max_num_batched_tokens=option.chunk_tokens,
                        max_num_seqs=max(1, min(PREFILL_MAX_SEQS, full_length)), extra_args=extra)
    tokens_per_step = option.batch_per_rank * (1 + req.mtp)
    if option.role == "decode":
        return VllmArgs(max_model_len=req.max_model_len, max_num_seqs=option.batch_per_rank, extra_args=extra,
                        max_num_batched_tokens=max(DECODE_MIN_BATCHED_TOKENS, tokens_per_step))
    return VllmArgs(max_model_len=req.max_model_len, max_num_seqs=option.batch_per_rank, extra_args=extra,
                    max_num_batched_tokens=option.chunk_tokens + tokens_per_step)


def _deployment_name(text: str, instances: list[Instance]) -> str:
    """`text` as an RFC 1035 label short enough that every Kubernetes object render names after it (the name, '-'
    and the longest instance name or object suffix) stays within 63 characters (validation APD305)."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not label[:1].isalpha():
        label = f"plan-{label}".rstrip("-")
    longest = max(len(name) for name in [*OBJECT_SUFFIXES, *(i.name for i in instances)])
    return label[:K8S_NAME_MAX - 1 - longest].rstrip("-")


def build_deployment(cost: CostModel, choice: Choice, units: int, req: Requirements, workload: Workload, slo: SLO,
                     cluster_ref: str) -> Deployment:
    cluster = cost.cluster
    groups = _serving_groups(cluster, units)
    wanted = [(option, index) for option, count in choice.instances for index in range(count)]
    instances: list[Instance] = []
    counters = {"prefill": 0, "decode": 0, "colocated": 0}
    ports = HostPorts(cluster.ephemeral_port_range())
    for group in groups:
        offset = 0
        for option, _ in sorted(wanted, key=lambda item: -item[0].devices):  # largest first keeps offsets aligned
            shape = option.shape
            devices = group[offset:offset + shape.devices]
            offset += shape.devices
            name = f"{option.role}-{counters[option.role]}"
            counters[option.role] += 1
            hosts = (cluster.node(node).host_ip for node in {d.node for d in devices})
            http_port, kv_port = ports.claim(name, hosts, shape.dp, shape.devices)
            instances.append(Instance(
                name=name, role=option.role, parallel=Parallel(tp=shape.tp, dp=shape.dp, ep=shape.ep, pp=shape.pp),
                devices=_placements(devices, shape.tp), http_port=http_port, kv_port=kv_port, engine_id=name,
                vllm=vllm_args(cost, option, req)))
    protocol = "ascend" if "ascend" in cluster.protocols else cluster.protocols[0]
    model = cost.model
    return Deployment(
        metadata=Metadata(name=_deployment_name(f"{model.id}-{cluster.name}", instances)),
        cluster=cluster.name if cluster_ref in shipped_clusters() else cluster_ref,
        model=ModelRef(name=model.id, quantization=cost.quantization, kv_cache_dtype=cost.kv_dtype,
                       path=f"{MODEL_ROOT}/{model.id}", served_name=model.id),
        connector=Connector(implementation=req.connector, mode=req.kv_mode, protocol=protocol),
        workload=workload, slo=slo, instances=instances, vllm_ascend_version=cost.cal.engine_version,
        proxy=Proxy(node=cluster.nodes[0].name, port=PROXY_PORT, policy=PROXY_POLICY,
                    workers=proxy_workers(workload.rate, float(req.lengths.output_tokens.mean()), req.accepted)))
