"""Build a ModelSpec from a Hugging Face config.json (a local file or the catalog's copy of one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ascend_pd.errors import InputError
from ascend_pd.models.spec import MLASpec, ModelSpec, MoESpec

_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def spec_from_config(config: dict[str, Any], model_id: str, description: str = "", source: str = "") -> ModelSpec:
    """Read the fields the cost model needs from a config.json mapping."""
    cfg = dict(config.get("text_config") or {}, **{k: v for k, v in config.items() if k != "text_config"})
    for key in _REQUIRED:
        if not isinstance(cfg.get(key), int) or cfg[key] <= 0:
            raise InputError(f"config.json lacks a positive integer '{key}'", file=source or None, field=key,
                             fix="point at the config.json of a decoder-only transformer model")
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    mla = None
    if cfg.get("kv_lora_rank"):
        mla = MLASpec(kv_lora_rank=cfg["kv_lora_rank"], qk_rope_head_dim=cfg["qk_rope_head_dim"],
                      qk_nope_head_dim=cfg["qk_nope_head_dim"], v_head_dim=cfg["v_head_dim"],
                      q_lora_rank=cfg.get("q_lora_rank"))
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    else:
        head_dim = cfg.get("head_dim") or hidden // heads
        if heads % kv_heads:
            raise InputError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
                             file=source or None, field="num_key_value_heads", fix="check the config.json")
    routed = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    moe = None
    if routed:
        moe = MoESpec(num_experts=routed, experts_per_token=cfg.get("num_experts_per_tok", 2),
                      num_shared_experts=cfg.get("n_shared_experts") or 0,
                      expert_intermediate_size=cfg.get("moe_intermediate_size") or cfg["intermediate_size"],
                      first_dense_layers=cfg.get("first_k_dense_replace") or 0)
    return ModelSpec(
        id=model_id, description=description, num_layers=cfg["num_hidden_layers"], hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=cfg.get("intermediate_size") or 4 * hidden, vocab_size=cfg["vocab_size"],
        max_position_embeddings=cfg.get("max_position_embeddings") or 4096,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), mla=mla, moe=moe,
        mtp_layers=cfg.get("num_nextn_predict_layers") or 0)


def from_hf_config(path: str | Path, model_id: str | None = None) -> ModelSpec:
    """A ModelSpec from a local model directory (or its config.json)."""
    path = Path(path)
    config_path = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no config.json here", file=str(config_path),
                         fix="pass a model directory that holds config.json, or a catalog model name") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON: {exc}", file=str(config_path), fix="check the file") from None
    if not isinstance(config, dict):
        raise InputError("expected a JSON object", file=str(config_path), fix="check the file")
    return spec_from_config(config, model_id or (path.name if path.is_dir() else path.parent.name),
                            source=str(config_path))
