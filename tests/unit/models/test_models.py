"""Model specs: parameter counts match the published sizes, KV bytes match hand computation, config.json reads."""

import json

import pytest

from ascend_pd.errors import InputError
from ascend_pd.models import from_hf_config, get_model, model_catalog

REQUIRED = {"deepseek-r1", "deepseek-v3", "qwen3-235b-a22b", "qwen3-32b", "qwen3-30b-a3b", "qwen2.5-7b",
            "llama-3.1-8b", "llama-3.1-70b"}


def test_catalog_has_required_models():
    assert REQUIRED <= set(model_catalog())


@pytest.mark.parametrize("model_id,total_b,active_b", [
    # Published sizes from the model cards.
    ("deepseek-r1", 671, 37), ("qwen3-235b-a22b", 235, 22), ("qwen3-30b-a3b", 30.5, 3.3),
    ("qwen3-32b", 32.8, 32.8), ("llama-3.1-8b", 8.03, 8.03), ("llama-3.1-70b", 70.6, 70.6), ("qwen2.5-7b", 7.61, 7.61),
])
def test_parameter_counts_match_published_sizes(model_id, total_b, active_b):
    spec = get_model(model_id)
    assert spec.total_params / 1e9 == pytest.approx(total_b, rel=0.03)
    assert spec.active_params / 1e9 == pytest.approx(active_b, rel=0.05)


def test_deepseek_r1_mla_kv_is_576_elements_times_61_layers():
    spec = get_model("deepseek-r1")
    assert spec.attention == "mla"
    assert spec.kv_bytes_per_token("bf16") == 576 * 61 * 2
    assert spec.kv_bytes_per_token("int8") == 576 * 61
    assert spec.kv_bytes_per_token("bf16", include_mtp=True) == 576 * 62 * 2


@pytest.mark.parametrize("model_id,layers,kv_heads,head_dim", [
    ("qwen3-235b-a22b", 94, 4, 128), ("qwen3-32b", 64, 8, 128), ("qwen3-30b-a3b", 48, 4, 128),
    ("llama-3.1-8b", 32, 8, 128),
])
def test_gqa_kv_bytes_are_two_times_heads_dim_layers(model_id, layers, kv_heads, head_dim):
    assert get_model(model_id).kv_bytes_per_token("bf16") == 2 * kv_heads * head_dim * layers * 2


def test_mla_kv_is_replicated_on_every_tp_rank_and_gqa_splits_until_one_head():
    mla, gqa = get_model("deepseek-r1"), get_model("qwen3-32b")
    assert mla.kv_bytes_per_token_per_device(16) == mla.kv_bytes_per_token()
    assert gqa.kv_bytes_per_token_per_device(4) == gqa.kv_bytes_per_token() / 4
    # 8 KV heads: at tp 16 each rank still holds one whole head
    assert gqa.kv_bytes_per_token_per_device(16) == gqa.kv_bytes_per_token() / 8


def test_quantized_weights_are_smaller():
    spec = get_model("deepseek-r1")
    bf16, w8, w4 = (spec.weight_bytes(q) for q in ("bf16", "w8a8", "w4a8"))
    assert w4 < w8 < bf16
    # W8A8 keeps only the embeddings in bf16: close to one byte per parameter
    assert w8 / spec.total_params == pytest.approx(1.0, abs=0.01)


def test_from_hf_config_reads_a_local_directory(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = from_hf_config(tmp_path)
    assert spec.attention == "gqa" and spec.head_dim == 32
    assert spec.kv_bytes_per_token("bf16") == 2 * 2 * 32 * 3 * 2
    assert get_model(str(tmp_path)).num_layers == 3


def test_from_hf_config_missing_field_names_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(InputError) as info:
        from_hf_config(tmp_path)
    assert info.value.field == "num_hidden_layers"


def test_unknown_model_suggests_catalog():
    with pytest.raises(InputError) as info:
        get_model("gpt-17")
    assert "deepseek-r1" in info.value.fix
