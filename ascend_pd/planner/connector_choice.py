"""Which KV connector and mode a plan writes, and which P and D shapes that connector can pair."""

from __future__ import annotations

from typing import Callable

from ascend_pd.errors import InputError
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.capacity import Option


def plan_connector(cost: CostModel, implementation: str | None, mode: str) -> tuple[str, str]:
    """(implementation, mode) for `plan --connector --kv-mode`. Without --connector: ascend-pd's, except for an int8
    (C8) KV cache on NPUs, which only vllm-ascend's layerwise (push) connector moves (validation APD413)."""
    on_npus = "ascend" in cost.cluster.protocols
    c8 = cost.kv_dtype == "int8" and on_npus
    if implementation is None:
        return ("vllm-ascend", "push") if c8 else ("ascend-pd", mode)
    if implementation == "vllm-ascend" and not on_npus:
        raise InputError(f"--connector vllm-ascend runs only on Ascend NPUs; cluster '{cost.cluster.name}' has none "
                         "(validation APD402)", field="--connector", fix="use --connector ascend-pd")
    if c8 and (implementation == "ascend-pd" or (mode == "pull" and not cost.model.mla)):
        raise InputError(f"--kv-dtype int8 with --connector {implementation} --kv-mode {mode}: vllm-ascend keeps "
                         "prefill's KV cache in bf16 and only its layerwise connector quantizes it on the way to D "
                         "(validation APD413)", field="--connector",
                         fix="use --connector vllm-ascend --kv-mode push, or --kv-dtype bf16")
    return implementation, mode


def connector_pairs(cost: CostModel, implementation: str, mode: str) -> Callable[[Option, Option], bool]:
    """Which prefill and decode options the connector can pair. vllm-ascend's pull connector refuses
    P TP below D TP, and its AscendConfig wants P TP a multiple of D TP for any model without MLA (validation
    APD403); ascend-pd's pairs TP sizes that divide one another, as the planner's powers of two all do."""
    if implementation != "vllm-ascend":
        return lambda p, d: True
    if mode == "push" and cost.model.mla:
        return lambda p, d: True
    return lambda p, d: p.shape.tp >= d.shape.tp and p.shape.tp % d.shape.tp == 0
