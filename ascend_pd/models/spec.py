"""ModelSpec: the shape of a dense or MoE, GQA or MLA model, and what follows from it (parameters, KV bytes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ascend_pd.models.quant import get_quantization, kv_element_bytes


@dataclass(frozen=True)
class MLASpec:
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None


@dataclass(frozen=True)
class MoESpec:
    num_experts: int  # routed experts
    experts_per_token: int
    num_shared_experts: int
    expert_intermediate_size: int
    first_dense_layers: int  # leading layers with a dense MLP instead of experts


@dataclass(frozen=True)
class ModelSpec:
    id: str
    description: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int  # for MLA: the attention heads (the latent cache has no head dimension)
    head_dim: int  # query/key head dim for GQA; qk_nope + qk_rope for MLA
    intermediate_size: int  # dense MLP width
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    mtp_layers: int = 0

    # --- kind ------------------------------------------------------------------------------------------------
    @property
    def attention(self) -> Literal["mla", "gqa", "mha"]:
        if self.mla:
            return "mla"
        return "mha" if self.num_kv_heads == self.num_attention_heads else "gqa"

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.moe.first_dense_layers if self.moe else 0

    @property
    def dense_layers(self) -> int:
        return self.num_layers - self.moe_layers

    # --- KV cache --------------------------------------------------------------------------------------------
    def kv_elements_per_token_per_layer(self) -> int:
        """Elements one token adds to one layer's cache, over all heads (MLA: latent + rope, no heads)."""
        if self.mla:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes_per_token(self, kv_dtype: str = "bf16", include_mtp: bool = False) -> int:
        layers = self.num_layers + (self.mtp_layers if include_mtp else 0)
        return self.kv_elements_per_token_per_layer() * layers * kv_element_bytes(kv_dtype)

    def kv_bytes_per_token_per_device(self, tp: int, kv_dtype: str = "bf16") -> float:
        """KV bytes one token occupies on each device of a TP group: MLA's latent cache is replicated on every
        rank; GQA heads split across ranks, and when tp exceeds the KV heads each rank still holds one head."""
        total = self.kv_bytes_per_token(kv_dtype)
        if self.mla:
            return total
        return total * max(1, self.num_kv_heads // tp) / self.num_kv_heads

    # --- parameters ------------------------------------------------------------------------------------------
    def attention_params_per_layer(self) -> int:
        h, n = self.hidden_size, self.num_attention_heads
        if self.mla:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            q = h * m.q_lora_rank + m.q_lora_rank * n * qk if m.q_lora_rank else h * n * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + n * m.v_head_dim * h
        return h * n * self.head_dim * 2 + h * self.num_kv_heads * self.head_dim * 2

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """One expert (gate, up and down projections)."""
        return 3 * self.hidden_size * self.moe.expert_intermediate_size if self.moe else 0

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def total_params(self) -> int:
        """All parameters of the main model (MTP layers excluded, as published totals do)."""
        attn = self.attention_params_per_layer() * self.num_layers
        dense = self.dense_mlp_params() * self.dense_layers
        if self.moe:
            experts = (self.moe.num_experts + self.moe.num_shared_experts) * self.expert_params()
            router = self.hidden_size * self.moe.num_experts
            dense += (experts + router) * self.moe_layers
        return attn + dense + self.embedding_params()

    @property
    def active_params(self) -> int:
        """Parameters one token touches: all attention and dense layers, top-k plus shared experts."""
        attn = self.attention_params_per_layer() * self.num_layers
        dense = self.dense_mlp_params() * self.dense_layers
        if self.moe:
            active_experts = self.moe.experts_per_token + self.moe.num_shared_experts
            dense += (active_experts * self.expert_params() + self.hidden_size * self.moe.num_experts) * self.moe_layers
        return attn + dense + self.embedding_params()

    def matmul_flops_per_token(self) -> float:
        """2 x active parameters, without the embedding lookup (the LM head is a real matmul)."""
        lookup = self.vocab_size * self.hidden_size
        return 2.0 * (self.active_params - (0 if self.tie_word_embeddings else lookup))

    def weight_bytes(self, quantization: str = "bf16") -> float:
        """Bytes of all weights at `quantization` (experts and dense weights may differ in width)."""
        q = get_quantization(quantization)
        expert = 0
        if self.moe:
            expert = (self.moe.num_experts + self.moe.num_shared_experts) * self.expert_params() * self.moe_layers
        dense = self.total_params - expert - self.embedding_params()
        return dense * q.dense_weight_bytes + expert * q.expert_weight_bytes + self.embedding_params() * q.embedding_bytes
