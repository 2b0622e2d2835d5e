"""Build the tiny CPU test models offline: a Llama-style GQA model, a DeepSeek-V2-style MLA + MoE model, and the
same MLA model as DeepSeek-V3 with one MTP (draft) layer.

Usage: python tools/make_tiny_models.py DIR   -> DIR/tiny-llama-gqa, DIR/tiny-deepseek-mla, DIR/tiny-deepseek-mtp
       python tools/make_tiny_models.py --deep DIR   -> DIR/tiny-llama-deep (tools/bench_overlap.py's model)

Weights are random with a fixed seed, the tokenizer is a byte-level BPE trained here on generated text, so nothing
is downloaded. The shapes match the `tiny-llama-gqa` and `tiny-deepseek-mla` entries of the model catalog.
Weights are initialised wide (initializer_range 0.25) so greedy outputs change with every prompt token: a corrupted
KV transfer then shows up as different tokens instead of hiding behind one repeated token.
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

VOCAB_SIZE = 512
SEED = 1234
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = ("ascend prefill decode cache block layer head token model serve proxy engine tensor device node pod "
         "transfer kernel latency throughput batch prompt output stream request route health metric plan render "
         "alpha beta gamma delta one two three four five six seven eight nine ten the a of to and in is it").split()


def _corpus(lines: int = 4000) -> list[str]:
    rng = random.Random(SEED)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) for _ in range(lines)]


def make_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<unk>", "<pad>"]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def _save(model, tokenizer, out: Path) -> None:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def make_gqa(out: Path, tokenizer) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         initializer_range=0.25, tie_word_embeddings=False, torch_dtype="bfloat16",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    _save(LlamaForCausalLM(config), tokenizer, out)


def make_deep_gqa(out: Path, tokenizer) -> None:
    """A model whose KV outweighs its compute, for tools/bench_overlap.py: 16 layers of 8 KV heads x 128 (64 KiB of
    bf16 KV per token) on a 256-wide residual stream, 16K positions."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=512, num_hidden_layers=16,
                         num_attention_heads=8, num_key_value_heads=8, head_dim=128, max_position_embeddings=16384,
                         initializer_range=0.25, tie_word_embeddings=False, torch_dtype="bfloat16",
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    _save(LlamaForCausalLM(config), tokenizer, out)


def make_mla(out: Path, tokenizer) -> None:
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    torch.manual_seed(SEED)
    # vLLM's CPU MLA backend accepts only a latent + rope head size of 576, hence 512 + 64.
    config = DeepseekV2Config(vocab_size=VOCAB_SIZE, hidden_size=128, intermediate_size=256,
                              moe_intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                              num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                              first_k_dense_replace=1, kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64,
                              qk_nope_head_dim=32, v_head_dim=32, topk_method="greedy", n_group=1, topk_group=1,
                              max_position_embeddings=2048, initializer_range=0.25, tie_word_embeddings=False,
                              torch_dtype="bfloat16", bos_token_id=tokenizer.bos_token_id,
                              eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    _save(DeepseekV2ForCausalLM(config), tokenizer, out)


def make_mtp(out: Path, mla: Path, tokenizer) -> None:
    """tiny-deepseek-mla plus one MTP layer at index num_hidden_layers, laid out as DeepSeek-V3 checkpoints are
    (enorm, hnorm, eh_proj, shared_head and a full MLA + MoE decoder layer), so vLLM serves it with
    --speculative-config deepseek_mtp and the draft layer owns a KV cache of its own."""
    import json

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    config = json.loads((mla / "config.json").read_text())
    layers, hidden, vocab = config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]
    weights = load_file(str(mla / "model.safetensors"))
    # The draft's decoder layer: layer 1 (a MoE layer) of a 2-layer model of the same shapes. save_pretrained
    # writes one tensor per expert, the names vLLM's DeepSeek-MTP loader expects.
    torch.manual_seed(SEED + 1)
    block_config = DeepseekV2Config(**{k: v for k, v in config.items()
                                       if k not in ("architectures", "model_type", "transformers_version", "dtype")})
    block_config.num_hidden_layers = 2
    _save(DeepseekV2ForCausalLM(block_config), tokenizer, out / "block")
    for key, tensor in load_file(str(out / "block" / "model.safetensors")).items():
        if key.startswith("model.layers.1."):
            weights[key.replace("model.layers.1.", f"model.layers.{layers}.")] = tensor.contiguous()
    shutil.rmtree(out / "block")
    generator = torch.Generator().manual_seed(SEED + 2)
    draft = f"model.layers.{layers}."
    for name in ("enorm", "hnorm", "shared_head.norm"):
        weights[f"{draft}{name}.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    weights[f"{draft}eh_proj.weight"] = (torch.randn(hidden, 2 * hidden, generator=generator) * 0.25).bfloat16()
    weights[f"{draft}shared_head.head.weight"] = (torch.randn(vocab, hidden, generator=generator) * 0.25).bfloat16()
    weights[f"{draft}embed_tokens.weight"] = weights["model.embed_tokens.weight"].clone()
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.update(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], num_nextn_predict_layers=1)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for path in mla.iterdir():
        if path.is_file() and path.name not in ("config.json", "model.safetensors"):
            shutil.copy(path, out / path.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="where to write tiny-llama-gqa/, tiny-deepseek-mla/, tiny-deepseek-mtp/")
    parser.add_argument("--deep", action="store_true", help="write only tiny-llama-deep/ (bench_overlap's model)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(args.dir / "tokenizer")
    if args.deep:
        names = ["tiny-llama-deep"]
        make_deep_gqa(args.dir / "tiny-llama-deep", tokenizer)
    else:
        names = ["tiny-llama-gqa", "tiny-deepseek-mla", "tiny-deepseek-mtp"]
        make_gqa(args.dir / "tiny-llama-gqa", tokenizer)
        make_mla(args.dir / "tiny-deepseek-mla", tokenizer)
        make_mtp(args.dir / "tiny-deepseek-mtp", args.dir / "tiny-deepseek-mla", tokenizer)
    for name in names:
        size = sum(p.stat().st_size for p in (args.dir / name).iterdir())
        print(f"{args.dir / name}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
