"""Bytes per element by quantization scheme, for weights, activations and the KV cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

QuantName = Literal["bf16", "w8a8", "w4a8", "w4a16"]
KVDtype = Literal["bf16", "int8"]


@dataclass(frozen=True)
class Quantization:
    name: str
    dense_weight_bytes: float  # attention and dense MLP matmul weights
    expert_weight_bytes: float  # routed and shared MoE expert weights
    embedding_bytes: float  # embedding and LM head stay in bf16 in the Ascend quantized releases
    compute_precision: str  # 'bf16' or 'int8': which peak of the chip matmuls run at


QUANTIZATIONS: dict[str, Quantization] = {
    "bf16": Quantization("bf16", 2.0, 2.0, 2.0, "bf16"),
    "w8a8": Quantization("w8a8", 1.0, 1.0, 2.0, "int8"),
    # W4A8: int4 experts, int8 attention and dense layers (as in the DeepSeek W4A8 releases for Ascend).
    "w4a8": Quantization("w4a8", 1.0, 0.5, 2.0, "int8"),
    # W4A16: int4 experts only, run in bf16 (Kimi-K2-Thinking's native INT4 checkpoint).
    "w4a16": Quantization("w4a16", 2.0, 0.5, 2.0, "bf16"),
}

KV_BYTES: dict[str, int] = {"bf16": 2, "int8": 1}


def role_kv_dtype(kv_dtype: str, role: str) -> str:
    """The dtype of one role's KV cache: vllm-ascend's C8 (int8 KV) gives only a KV consumer an int8 cache; a
    prefill instance (producer) keeps bf16 and, with the layerwise connector, quantizes as it sends
    (quantization/methods/kv_c8.py)."""
    return "bf16" if role == "prefill" else kv_dtype


def get_quantization(name: str) -> Quantization:
    try:
        return QUANTIZATIONS[name.lower()]
    except KeyError:
        raise KeyError(f"unknown quantization '{name}'; known: {', '.join(QUANTIZATIONS)}") from None


def kv_element_bytes(kv_dtype: str) -> int:
    try:
        return KV_BYTES[kv_dtype.lower()]
    except KeyError:
        raise KeyError(f"unknown KV cache dtype '{kv_dtype}'; known: {', '.join(KV_BYTES)}") from None
