"""Figures for one fixed instance shape (what `ascend-pd estimate` prints): step time, TTFT or TPOT, throughput,
memory and the time breakdown."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from ascend_pd.defaults import PREFILL_BATCH_TOKENS
from ascend_pd.perf.cost import CostModel, accepted_tokens_per_step
from ascend_pd.perf.shape import Shape


@dataclass(frozen=True)
class EstimateRequest:
    role: Literal["prefill", "decode"]
    shape: Shape
    context: int  # tokens per sequence (decode: the mean length the batch reads; prefill: the prompt length)
    batch_per_device: float = 1.0  # decode: sequences per device
    prompt_len: int | None = None  # prefill: tokens per prompt (default: context)
    batch_tokens: int | None = None  # prefill: tokens batched per device (default: one prompt per DP rank)
    mtp: int = 0
    mtp_acceptance: float = 0.0
    burst: int = 0  # prefill: this many prompts arriving together per DP rank (0: none), prefilled batch_tokens
    # per device a step (default: the max_num_batched_tokens a plan renders)


def _prefill_batch(req: EstimateRequest) -> list[float]:
    prompt = req.prompt_len or req.context
    rank_tokens = req.batch_tokens * req.shape.tp if req.batch_tokens else prompt
    whole, rest = divmod(rank_tokens, prompt)
    return [float(prompt)] * int(whole) + ([float(rest)] if rest else [])


def estimate(cost: CostModel, req: EstimateRequest) -> dict[str, Any]:
    """The estimate as a JSON-ready mapping (times in ms, breakdown in seconds)."""
    shape = req.shape
    fit = cost.memory(shape)
    out: dict[str, Any] = {"role": req.role, "model": cost.model.id, "chip": cost.chip.id,
                           "calibration": cost.cal.name, "execution_mode": cost.mode.label(),
                           "quantization": cost.quantization, "kv_cache_dtype": cost.kv_dtype,
                           "parallel": {"tp": shape.tp, "dp": shape.dp, "ep": shape.ep, "pp": shape.pp},
                           "kv_bytes_per_token": cost.model.kv_bytes_per_token(cost.kv_dtype),
                           "kv_bytes_per_token_per_device": fit.kv_bytes_per_token}
    if req.role == "prefill":
        batch = _prefill_batch(req)
        step = cost.prefill_time(shape, batch)
        kv_tokens = sum(batch)
        per_device = sum(batch) / step.total / shape.rank_devices
        # a client's TTFT holds the server's request path too (tokenizing, scheduling, the first token's way out)
        overhead = cost.request_overhead()
        out.update(step_ms=step.total * 1e3, ttft_ms=(step.total + overhead) * 1e3,
                   request_overhead_ms=overhead * 1e3, prompts_per_rank=len(batch), tokens_per_rank=sum(batch))
        if req.burst:
            step_tokens = req.batch_tokens * shape.tp if req.batch_tokens else PREFILL_BATCH_TOKENS
            out.update(burst_ttft_ms=cost.burst_ttft(shape, batch[0], req.burst, step_tokens) * 1e3,
                       burst_prompts_per_rank=req.burst, burst_step_tokens=step_tokens)
    else:
        rank_batch = req.batch_per_device * shape.tp
        step = cost.decode_step(shape, rank_batch, req.context, req.mtp)
        accepted = accepted_tokens_per_step(req.mtp, req.mtp_acceptance)
        kv_tokens = rank_batch * req.context
        per_device = rank_batch * accepted / step.total / shape.rank_devices
        out.update(step_ms=step.total * 1e3, tpot_ms=step.total / accepted * 1e3, accepted_tokens_per_step=accepted,
                   batch_per_rank=rank_batch,
                   max_batch_per_rank=cost.max_decode_batch(shape, req.context))
    out["tokens_per_s_per_device"] = per_device
    if cost.chip.dies_per_package > 1:
        out["tokens_per_s_per_package"] = per_device * cost.chip.dies_per_package
    out["tokens_per_s_per_instance"] = per_device * shape.devices
    out["memory_per_device_bytes"] = fit.weights_bytes + kv_tokens * fit.kv_bytes_per_token
    out["weights_per_device_bytes"] = fit.weights_bytes
    out["memory_budget_per_device_bytes"] = fit.budget_bytes
    out["fits"] = bool(fit.fits_weights and kv_tokens <= fit.kv_capacity_tokens)
    out["breakdown"] = {name: value for name, value in step.parts.items() if not math.isclose(value, 0.0)}
    return out
