"""The cost model: prefill time, decode step time, memory and KV transfer for one model on one chip and cluster.

Operators are composed from the model's shape and the chip's peaks (ascend_pd/hardware) with the efficiencies of
calibration.yaml; nothing here names a chip. The planner and the simulator share these estimators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

from ascend_pd.defaults import GPU_MEMORY_UTILIZATION
from ascend_pd.hardware import Chip, Cluster, LinkTier
from ascend_pd.models import ModelSpec, get_quantization
from ascend_pd.models.quant import Quantization, role_kv_dtype
from ascend_pd.perf.calibration import Calibration, calibration_for
from ascend_pd.perf.comm import all_reduce_time, all_to_all_time, transfer_time
from ascend_pd.perf.exec_mode import ExecMode, GraphMode
from ascend_pd.perf.memory import MemoryFit, memory_fit
from ascend_pd.perf.shape import Links, Shape, group_link

ACTIVATION_BYTES = 2  # bf16 hidden states on the wire
DISPATCH_BYTES = 1  # MoE dispatch sends int8-quantized tokens; combine returns bf16


@dataclass(frozen=True)
class Breakdown:
    """Seconds per component; `total` is what the step or batch takes (compute and memory overlap)."""

    total: float
    parts: dict[str, float] = field(default_factory=dict)


def accepted_tokens_per_step(mtp: int, acceptance: float) -> float:
    """Expected tokens a decode step emits with `mtp` draft tokens, each accepted with probability `acceptance`
    if every earlier draft was: 1 + p + p^2 + ... + p^mtp."""
    return sum(acceptance**i for i in range(mtp + 1))


@dataclass(frozen=True)
class CostModel:
    model: ModelSpec
    chip: Chip
    cluster: Cluster
    quantization: str = "bf16"
    kv_dtype: str = "bf16"
    calibration: Calibration | None = None
    mode: ExecMode = ExecMode()  # how the engine runs its steps, from its launch flags
    # What a running deployment showed against these estimates (ascend_pd.planner.replan): prefill and decode
    # times are multiplied by them. 1 for a plan, which has nothing observed yet.
    prefill_scale: float = 1.0
    decode_scale: float = 1.0

    # Worked out once from the model, quantization and chip, which no calibration changes (see `calibrated`).
    _q: Quantization = field(init=False, repr=False, compare=False)
    _expert_flops_per_token: float = field(init=False, repr=False, compare=False)
    _other_flops_per_token: float = field(init=False, repr=False, compare=False)
    _linear_peak_flops: float = field(init=False, repr=False, compare=False)
    # (prefill, decode) attention FLOPs per token per context token per layer: causal MHA-form prefill
    # n_h (d_qk + d_v); decode 2 n_h (d_k + d_v) (MLA absorbed: 2 n_h (2c + r))
    _attn_dims: tuple[float, float] = field(init=False, repr=False, compare=False)
    # bytes of weights: those every device of a TP group reads (all but routed experts and the embedding lookup),
    # and the routed experts of all layers
    _held_weight_bytes: float = field(init=False, repr=False, compare=False)
    _routed_weight_bytes: float = field(init=False, repr=False, compare=False)
    _link_cache: dict[Shape, Links] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        m, q = self.model, get_quantization(self.quantization)
        expert_flops = 2.0 * m.moe.experts_per_token * m.expert_params() * m.moe_layers if m.moe else 0.0
        if m.mla:
            prefill = m.num_attention_heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim + m.mla.v_head_dim)
            decode = 2 * m.num_attention_heads * (2 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim)
        else:
            prefill = m.num_attention_heads * 2 * m.head_dim
            decode = 2 * m.num_attention_heads * 2 * m.head_dim
        routed = shared = 0.0
        if m.moe:
            per_expert = m.expert_params() * m.moe_layers * q.expert_weight_bytes
            routed = m.moe.num_experts * per_expert
            shared = m.moe.num_shared_experts * per_expert
        lookup = m.vocab_size * m.hidden_size * q.embedding_bytes * (0 if m.tie_word_embeddings else 1)
        rest = m.weight_bytes(self.quantization) - routed - shared - lookup
        for name, value in (("_q", q), ("_expert_flops_per_token", expert_flops),
                            ("_other_flops_per_token", m.matmul_flops_per_token() - expert_flops),
                            ("_linear_peak_flops", self.chip.peak_flops(q.compute_precision)),
                            ("_attn_dims", (float(prefill), float(decode))),
                            ("_held_weight_bytes", rest + shared),
                            ("_routed_weight_bytes", routed), ("_link_cache", {})):
            object.__setattr__(self, name, value)

    @cached_property
    def cal(self) -> Calibration:
        return self.calibration or calibration_for(self.chip.id)

    def calibrated(self, calibration: Calibration) -> CostModel:
        """This cost model under `calibration`, keeping what it worked out of the model and chip: a fit predicts
        each of its rows under thousands of calibrations."""
        twin = object.__new__(CostModel)
        twin.__dict__.update(self.__dict__, calibration=calibration)
        twin.__dict__.pop("cal", None)
        return twin

    def _weights_read(self, shape: Shape, group_tokens: float) -> float:
        """Bytes of weights one device reads in one forward pass: everything it holds but the embedding table
        (a lookup), with routed experts counted only if some token of the group is routed to them."""
        m = self.model
        routed = self._routed_weight_bytes / (shape.ep if shape.ep > 1 else shape.tp)
        if m.moe:
            untouched = (1 - m.moe.experts_per_token / m.moe.num_experts) ** group_tokens
            routed *= 1 - untouched
        return self._held_weight_bytes / shape.tp + routed

    def _imbalance(self, shape: Shape, group_tokens: float) -> float:
        """Busiest EP rank's expert work over the mean, for tokens routed at random: loads are near-Poisson with
        mean m, and the largest of `ep` of them is about m + sqrt(2 m ln ep)."""
        if not self.model.moe or shape.ep <= 1:
            return 1.0
        mean = group_tokens * self.model.moe.experts_per_token / shape.ep
        return 1.0 + math.sqrt(2 * math.log(shape.ep) / max(mean, 1.0))

    def _compute_time(self, shape: Shape, rank_tokens: float, attention_flops: float, eff: float,
                      expert_slowdown: float = 1.0) -> float:
        group_tokens = rank_tokens * (shape.dp if shape.ep > 1 else 1)
        experts = self._expert_flops_per_token * self._imbalance(shape, group_tokens) * expert_slowdown
        linear = rank_tokens / shape.tp * (self._other_flops_per_token + experts)
        return (linear / self._linear_peak_flops
                + attention_flops / shape.tp / self.chip.bf16_flops) / eff

    def _collectives(self, shape: Shape, rank_tokens: float, links: Links) -> dict[str, float]:
        """TP all-reduce twice per layer, EP dispatch and combine once per MoE layer; each call pays the
        collective's fixed launch cost on top of its alpha-beta time on the tier the group spans."""
        m, launch = self.model, self.cal.collective_launch_s
        hidden_bytes = rank_tokens * m.hidden_size * ACTIVATION_BYTES
        parts = {"tp_all_reduce": 0.0}
        if shape.tp > 1:
            parts["tp_all_reduce"] = 2 * m.num_layers * (all_reduce_time(hidden_bytes, shape.tp, links.tp) + launch)
        if m.moe and shape.ep > 1:
            routed_tokens = rank_tokens / shape.tp * m.moe.experts_per_token
            dispatch = all_to_all_time(routed_tokens * m.hidden_size * DISPATCH_BYTES, shape.ep, links.ep)
            combine = all_to_all_time(routed_tokens * m.hidden_size * ACTIVATION_BYTES, shape.ep, links.ep)
            parts["ep_dispatch"] = m.moe_layers * (dispatch + launch)
            parts["ep_combine"] = m.moe_layers * (combine + launch)
        return parts

    def _links(self, shape: Shape) -> Links:
        if shape not in self._link_cache:
            self._link_cache[shape] = Links.on(self.cluster, shape)
        return self._link_cache[shape]

    def _kernel_launches(self, layers: float) -> float:
        """The device's own fixed cost of the kernels of `layers` layers."""
        return layers * self.cal.ops_per_layer * self.cal.kernel_launch_s

    def _framework(self, layers: float, graph: GraphMode) -> float:
        """The host's work to run `layers` layers: large op by op, less when graph pieces replay with attention
        between them, least when one captured graph replays. Run op by op, a MoE layer adds its routing, token
        permutation and expert dispatch, each a handful of small ops."""
        cal, m = self.cal, self.model
        per_layer = {"eager": cal.layer_overhead_eager_s, "piecewise": cal.layer_overhead_piecewise_s,
                     "full": cal.layer_overhead_graph_s}[graph]
        if graph == "eager" and m.moe:
            per_layer += cal.layer_overhead_moe_eager_s * m.moe_layers / m.num_layers
        return layers * per_layer

    def _step(self, device: float, framework: float, tokens: float) -> tuple[float, float]:
        """(step time, its host part that shows) for a step whose kernels take the device `device` seconds, whose
        layers take the host `framework` seconds to launch, and which samples `tokens` tokens. Launches queue ahead
        of the device, so the two overlap. Scheduling and preparing the step runs before them, or, with async
        scheduling, while the device runs the previous step."""
        schedule = self.cal.step_overhead_s + tokens * self.cal.sampling_per_token_s
        if self.mode.async_scheduling:
            total = max(device, framework + schedule)
        else:
            total = schedule + max(device, framework)
        return total, total - device

    # --- prefill ---------------------------------------------------------------------------------------------
    def prefill_time(self, shape: Shape, prompt_lens: Sequence[float]) -> Breakdown:
        """One prefill step of one DP rank over the prompts `prompt_lens` (every DP rank runs a like batch)."""
        tokens = float(sum(prompt_lens))
        attention = self._attn_dims[0] * self.model.num_layers * float(sum(n * n for n in prompt_lens))
        compute = self._compute_time(shape, tokens, attention, self.cal.prefill_efficiency,
                                     1 / self.cal.prefill_expert_ratio)
        group_tokens = tokens * (shape.dp if shape.ep > 1 else 1)
        memory = self._weights_read(shape, group_tokens) / (self.chip.hbm_bandwidth * self.cal.hbm_efficiency)
        comm = self._collectives(shape, tokens, self._links(shape))
        comm_total = sum(comm.values())
        busy = max(compute, memory)
        exposed = max(0.0, comm_total - busy) if self.cal.prefill_overlap else comm_total
        layers = self.model.num_layers
        launches = self._kernel_launches(layers)
        total, host = self._step(busy + exposed + launches, self._framework(layers, "eager"), len(prompt_lens))
        parts = {"compute": compute, "weights_read": memory, **comm, "communication_exposed": exposed,
                 "kernel_launches": launches, "host_exposed": host}
        return Breakdown(total * self.prefill_scale, parts)

    def prefill_step_timer(self, shape: Shape) -> Callable[[float, float, int], float]:
        """prefill_time(shape, prompts).total as a function of the batch's tokens, the sum of its prompts' squared
        lengths and its prompt count, for callers that time many batches (the planner's prefill queue). Each term
        of prefill_time is affine in the tokens but the expert imbalance and the experts a batch touches, so the
        affine terms are probed once here and the other two are evaluated per call."""
        cal, m = self.cal, self.model
        eff, flops = cal.prefill_efficiency, self.chip.peak_flops(self._q.compute_precision)
        other = self._other_flops_per_token / shape.tp / flops / eff
        expert = self._expert_flops_per_token / shape.tp / flops / eff / cal.prefill_expert_ratio
        attention = self._attn_dims[0] * m.num_layers / shape.tp / self.chip.bf16_flops / eff
        group = shape.dp if shape.ep > 1 else 1
        bandwidth = self.chip.hbm_bandwidth * cal.hbm_efficiency
        held = self._weights_read(shape, 0.0) / bandwidth  # with no token routed: every weight but the experts
        experts = self._weights_read(shape, math.inf) / bandwidth - held
        untouched = 1 - m.moe.experts_per_token / m.moe.num_experts if m.moe else 0.0
        links = self._links(shape)
        comm_fixed = sum(self._collectives(shape, 0.0, links).values())
        comm_per_token = sum(self._collectives(shape, 1.0, links).values()) - comm_fixed
        launches, framework = self._kernel_launches(m.num_layers), self._framework(m.num_layers, "eager")
        imbalance, overlap, scale = self._imbalance, cal.prefill_overlap, self.prefill_scale
        balanced = not m.moe or shape.ep <= 1  # _imbalance is 1 for every batch
        schedule_fixed, schedule_per_token = cal.step_overhead_s, cal.sampling_per_token_s
        async_scheduling = self.mode.async_scheduling

        # The planner's prefill queue calls this millions of times a plan: _step's arithmetic, written out here.
        def step(tokens: float, square_sum: float, count: int) -> float:
            balance = 1.0 if balanced else imbalance(shape, tokens * group)
            compute = tokens * (other + expert * balance) + attention * square_sum
            memory = held + experts * (1 - untouched ** (tokens * group))
            busy = max(compute, memory)
            comm = comm_fixed + comm_per_token * tokens
            device = busy + (max(0.0, comm - busy) if overlap else comm) + launches
            schedule = schedule_fixed + count * schedule_per_token
            if async_scheduling:
                return max(device, framework + schedule) * scale
            return (schedule + max(device, framework)) * scale

        return step

    def burst_ttft(self, shape: Shape, prompt: float, count: int, step_tokens: float) -> float:
        """Mean TTFT, as clients see it, of `count` prompts of `prompt` tokens arriving together at one DP rank and
        prefilled in order `step_tokens` at a time: each prompt's first token comes with the step that holds its
        last token."""
        left = [prompt] * count
        now, done = 0.0, []
        while left:
            budget, chunks = step_tokens, []
            for i, tokens in enumerate(left):
                take = min(tokens, budget)
                chunks.append(take)
                left[i] -= take
                budget -= take
                if budget <= 0:
                    break
            now += self.prefill_time(shape, chunks).total
            done += [now] * sum(1 for tokens in left if tokens <= 0)
            left = [tokens for tokens in left if tokens > 0]
        return sum(done) / count + self.request_overhead()

    def chunk_time(self, shape: Shape, chunk_tokens: float, prompt_len: float) -> float:
        """What a chunk of `chunk_tokens` prompt tokens adds to a decode step that already reads the weights: its
        compute, at the attention cost of a `prompt_len`-token prompt."""
        compute = self.prefill_time(shape, [prompt_len]).parts["compute"]
        return compute * chunk_tokens / prompt_len * self.prefill_scale

    # --- decode ----------------------------------------------------------------------------------------------
    def decode_step(self, shape: Shape, batch_per_rank: float, context: float, mtp: int = 0) -> Breakdown:
        """One decode step of one DP rank holding `batch_per_rank` sequences of mean length `context`. With MTP
        the step verifies `mtp` draft tokens per sequence, then runs the draft layer(s) `mtp` times, each a
        forward pass of its own with its layers' share of the work and its own fixed costs."""
        m, cal = self.model, self.cal
        rank_tokens = batch_per_rank * (1 + mtp)
        attention = self._attn_dims[1] * m.num_layers * rank_tokens * context
        linear = self._compute_time(shape, rank_tokens, 0.0, cal.decode_efficiency)
        compute = self._compute_time(shape, rank_tokens, attention, cal.decode_efficiency)
        group_tokens = rank_tokens * (shape.dp if shape.ep > 1 else 1)
        bandwidth = self.chip.hbm_bandwidth * cal.hbm_efficiency
        weights = self._weights_read(shape, group_tokens) / bandwidth
        kv = batch_per_rank * context * m.kv_bytes_per_token_per_device(shape.tp, self.kv_dtype) / bandwidth
        comm = self._collectives(shape, rank_tokens, self._links(shape))
        graph = self.mode.decode_graph
        # Each kernel is bound by its own compute or its own memory traffic: the linear layers by the weights
        # they stream, attention by the KV cache it reads (a roofline per kind of operator, then summed).
        busy = max(linear, weights) + max(compute - linear, kv)
        launches = self._kernel_launches(m.num_layers)
        main, host = self._step(busy + sum(comm.values()) + launches, self._framework(m.num_layers, graph),
                                rank_tokens)
        draft = 0.0
        if mtp:
            draft_layers = max(1, m.mtp_layers)
            draft_comm = self._collectives(shape, batch_per_rank, self._links(shape))
            pass_device = (draft_layers / m.num_layers * (busy + sum(draft_comm.values()))
                           + self._kernel_launches(draft_layers))
            draft = mtp * self._step(pass_device, self._framework(draft_layers, graph), batch_per_rank)[0]
        parts = {"compute": compute, "weights_read": weights, "kv_read": kv, **comm, "kernel_launches": launches,
                 "host_exposed": host, "mtp_draft": draft}
        return Breakdown((main + draft) * self.decode_scale, parts)

    def tpot(self, shape: Shape, batch_per_rank: float, context: float, mtp: int = 0,
             acceptance: float = 0.0) -> float:
        return self.decode_step(shape, batch_per_rank, context, mtp).total / accepted_tokens_per_step(mtp, acceptance)

    # --- memory ----------------------------------------------------------------------------------------------
    def memory(self, shape: Shape, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
               role: str = "decode") -> MemoryFit:
        """What a device of `shape` holds; a prefill instance's KV cache stays bf16 under C8 (role_kv_dtype)."""
        return memory_fit(self.model, self.chip, self.quantization, role_kv_dtype(self.kv_dtype, role), shape.tp,
                          shape.pp, shape.ep, gpu_memory_utilization)

    def max_decode_batch(self, shape: Shape, tokens_per_sequence: float,
                         gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION) -> int:
        """The most sequences of `tokens_per_sequence` a DP rank's KV cache holds."""
        return int(self.memory(shape, gpu_memory_utilization).kv_capacity_tokens // max(tokens_per_sequence, 1.0))

    # --- KV transfer -----------------------------------------------------------------------------------------
    def request_overhead(self) -> float:
        """What a request's TTFT holds beyond the engine's steps: the server's path to the first token."""
        return self.cal.request_overhead_s

    def kv_transfer_time(self, prefill: Shape, tokens: float, link: LinkTier | None) -> float:
        """Moving one prompt's KV from a prefill rank to decode over `link` (None: the same devices): each of the
        rank's TP devices sends its share in parallel."""
        if link is None:
            return 0.0
        nbytes = tokens * self.model.kv_bytes_per_token(self.kv_dtype) / prefill.tp
        return transfer_time(nbytes, link)

    def kv_link(self, span_devices: int) -> LinkTier | None:
        """The tier P and D instances packed together on `span_devices` devices talk over."""
        return group_link(self.cluster, span_devices)

    def kv_exposed_time(self, transfer: float, prefill: float, mode: str) -> float:
        """The part of the transfer TTFT sees: all of it when pulled after prefill; when pushed layer by layer,
        only the last layer's share or what outlasts the prefill."""
        if mode != "push":
            return transfer
        return max(transfer / self.model.num_layers, transfer - prefill)
