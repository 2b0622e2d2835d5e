"""A real vLLM Scheduler with the AscendPDConnector loaded through kv_connector_module_path, and a tiny model config."""

from __future__ import annotations

import json
from pathlib import Path

import torch

BLOCK_SIZE = 16
NUM_BLOCKS = 64
KV_PORT = 29100


def tiny_model_dir(root: Path) -> Path:
    """A Llama config.json (no weights: the scheduler never runs the model)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
        "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 512, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}))
    return root


def vllm_config(model_dir: Path, *, role: str, mode: str, max_num_batched_tokens: int = 256,
                failure_policy: str = "recompute", prefill_tp: int = 1, rank_hosts: list[str] | None = None):
    from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, SchedulerConfig, VllmConfig

    transfer = KVTransferConfig(
        kv_connector="AscendPDConnector", kv_connector_module_path="ascend_pd.connector", kv_role=role,
        kv_port=KV_PORT, engine_id=f"{role}-0", kv_load_failure_policy=failure_policy,
        kv_connector_extra_config={"mode": mode, "protocol": "tcp", "abort_timeout_s": 30,
                                   "ascend_pd_shapes": {"prefill": {"tp_size": prefill_tp, "dp_size": 1},
                                                        "decode": {"tp_size": 1, "dp_size": 1}},
                                   **({"rank_hosts": rank_hosts} if rank_hosts else {})})
    return VllmConfig(
        model_config=ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=512),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=False),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=4,
                                         max_model_len=512, is_encoder_decoder=False,
                                         enable_chunked_prefill=True),
        kv_transfer_config=transfer)


def scheduler(config, log_stats: bool = False):
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config.cache_config.num_gpu_blocks = NUM_BLOCKS
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=2, head_size=32, dtype=torch.bfloat16)
    kv_cache_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)])
    return Scheduler(vllm_config=config, kv_cache_config=kv_cache_config,
                     structured_output_manager=StructuredOutputManager(config), block_size=BLOCK_SIZE,
                     log_stats=log_stats)


def request(request_id: str, num_tokens: int, params: dict | None, max_tokens: int = 1):
    from vllm import SamplingParams
    from vllm.v1.request import Request

    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    req = Request(request_id=request_id, prompt_token_ids=[(7 * i) % 500 + 1 for i in range(num_tokens)],
                  sampling_params=sampling, pooling_params=None)
    req.kv_transfer_params = params
    return req


def runner_output(scheduler_output, *, sample: bool = True, finished_sending=(), finished_recving=(),
                  invalid_block_ids=(), kv_connector_stats=None):
    """What the workers would return for a step: a token per scheduled request (none for a partial prefill
    chunk: sample=False), plus the connector's news and the workers' merged stats."""
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

    req_ids = list(scheduler_output.num_scheduled_tokens)
    return ModelRunnerOutput(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
        sampled_token_ids=[[5] if sample else [] for _ in req_ids],
        kv_connector_output=KVConnectorOutput(finished_sending=set(finished_sending) or None,
                                              finished_recving=set(finished_recving) or None,
                                              invalid_block_ids=set(invalid_block_ids),
                                              kv_connector_stats=kv_connector_stats))
