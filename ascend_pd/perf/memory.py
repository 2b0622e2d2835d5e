"""Device memory: weights per device under TP/PP/EP, KV cache per token per device, and what fits."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.defaults import GPU_MEMORY_UTILIZATION, RUNTIME_RESERVE_BYTES
from ascend_pd.hardware import Chip
from ascend_pd.models import ModelSpec, get_quantization

# RUNTIME_RESERVE_BYTES (ascend_pd.defaults): activations, workspace, HCCL buffers and the runtime's own
# allocations, per device. vllm-ascend deployments on 64 GB devices typically leave 6-10% free through
# gpu_memory_utilization; the reserve is what sits inside the budget.


@dataclass(frozen=True)
class MemoryFit:
    weights_bytes: float  # per device
    kv_bytes_per_token: float  # per device
    budget_bytes: float  # hbm x gpu_memory_utilization - reserve
    kv_capacity_tokens: int  # tokens of KV that fit beside the weights

    @property
    def fits_weights(self) -> bool:
        return self.kv_capacity_tokens > 0


def weights_per_device(model: ModelSpec, quantization: str, tp: int, pp: int = 1, ep: int = 1) -> float:
    """Bytes of weights one device holds. Attention and dense layers shard over TP and PP; routed experts shard
    over the EP group (EP 1 means experts shard over TP like a dense layer); embeddings shard over TP."""
    q = get_quantization(quantization)
    embedding = model.embedding_params() * q.embedding_bytes / tp
    routed = shared = 0.0
    if model.moe:
        per_layer = model.expert_params() * model.moe_layers
        routed = model.moe.num_experts * per_layer * q.expert_weight_bytes
        shared = model.moe.num_shared_experts * per_layer * q.expert_weight_bytes
    dense = model.weight_bytes(quantization) - routed - shared - model.embedding_params() * q.embedding_bytes
    routed_share = routed / ep if ep > 1 else routed / tp
    return embedding + (dense + shared) / (tp * pp) + routed_share / pp


def memory_fit(model: ModelSpec, chip: Chip, quantization: str, kv_dtype: str, tp: int, pp: int = 1, ep: int = 1,
               gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> MemoryFit:
    weights = weights_per_device(model, quantization, tp, pp, ep)
    kv_per_token = model.kv_bytes_per_token_per_device(tp, kv_dtype) / pp
    budget = chip.hbm_bytes * gpu_memory_utilization - RUNTIME_RESERVE_BYTES
    capacity = int(max(0.0, budget - weights) // kv_per_token)
    return MemoryFit(weights_bytes=weights, kv_bytes_per_token=kv_per_token, budget_bytes=budget,
                     kv_capacity_tokens=capacity)
