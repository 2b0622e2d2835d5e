"""The search: feasible instance shapes per role, then the P:D counts (or colocated count) with the most goodput."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Collection

import numpy as np

from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.capacity import (FluidCurve, Option, Requirements, colocated_option, decode_option,
                                        prefill_ceiling, prefill_option)
from ascend_pd.planner.connector_choice import connector_pairs
from ascend_pd.planner.modes import planned_costs

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Choice:
    """Instance counts of one or two options, and what they sustain together."""

    kind: str  # disaggregated | colocated
    instances: tuple[tuple[Option, int], ...]  # (option, count) per role: (prefill, decode) or (colocated,)
    rate: float  # requests/s the whole deployment sustains within the SLOs
    devices: int

    @property
    def rate_per_device(self) -> float:
        return self.rate / self.devices

    def option(self, role: str) -> Option | None:
        return next((o for o, _ in self.instances if o.role == role), None)

    def count(self, role: str) -> int:
        return next((n for o, n in self.instances if o.role == role), 0)

    def label(self) -> str:
        return " + ".join(f"{n} x {o.role[0].upper()} {o.shape.label()}" for o, n in self.instances)


@dataclass
class SearchResult:
    best: Choice
    alternatives: list[Choice]
    best_disaggregated: Choice | None
    best_colocated: Choice | None
    options: dict[str, list[Option]] = field(default_factory=dict)
    units: int = 1  # identical serving groups (one per SuperPoD when the budget spans several)


def _powers_of_two(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(max(limit, 1))) + 1)]


def unit_devices(cluster: Cluster) -> int:
    """Devices of one serving group: a SuperPoD where there are several, else the whole cluster."""
    if len(cluster.superpods) > 1:
        return cluster.superpod_device_count
    return cluster.device_count


def largest_instance(cluster: Cluster, budget: int) -> int:
    """Instance sizes are powers of two, so they pack without stranding devices; none crosses a SuperPoD."""
    unit = unit_devices(cluster)
    return max(p for p in _powers_of_two(min(budget, unit)) if unit % p == 0 or p <= cluster.devices_per_node)


def candidate_shapes(cost: CostModel, budget: int, max_model_len: int) -> list[Shape]:
    """Shapes whose TP fits a node and divides the heads, whose EP follows vLLM's rule (1 or tp x dp), and whose
    weights leave room for one sequence of max_model_len."""
    model, cluster = cost.model, cost.cluster
    tps = [tp for tp in _powers_of_two(cluster.devices_per_node) if model.num_attention_heads % tp == 0
           and (model.mla or model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0)]
    shapes = []
    for size in _powers_of_two(largest_instance(cluster, budget)):
        for tp in (t for t in tps if t <= size):
            for ep in ([1, size] if model.is_moe and size > 1 else [1]):
                shape = Shape(tp=tp, dp=size // tp, ep=ep)
                if cost.memory(shape).kv_capacity_tokens >= max_model_len:
                    shapes.append(shape)
    return shapes


def evaluate_options(cost: CostModel, req: Requirements, budget: int, progress: Progress | None = None,
                     only: Collection[Shape] | None = None) -> dict[str, list[Option]]:
    """Options of every candidate shape, or of the shapes in `only` (a re-plan keeps a deployment's shapes)."""
    shapes = [s for s in candidate_shapes(cost, budget, req.max_model_len) if only is None or s in only]
    if not shapes:
        raise InputError(f"{cost.model.id} ({cost.quantization}) does not fit {budget} {cost.chip.id} devices with "
                         f"max_model_len {req.max_model_len}", field="--devices",
                         fix="give more devices, a smaller quantization (--quant w8a8), or shorter requests")
    span = min(budget, unit_devices(cost.cluster))
    options: dict[str, list[Option]] = {"prefill": [], "decode": [], "colocated": []}
    curve = FluidCurve.of(req)
    costs = planned_costs(cost, req.mtp)  # each role priced in the mode its rendered engine runs
    for index, shape in enumerate(shapes):
        if progress:
            progress(shape.label(), index, len(shapes))
        for role, found in (("decode", decode_option(costs["decode"], shape, req)),
                            ("colocated", colocated_option(costs["colocated"], shape, req, curve))):
            if found is not None:
                options[role].append(found)
    # Prefill options are played out request by request, the costly part of the search: shapes go from the highest
    # ceiling per device down, and one whose ceiling is below the best rate per device found cannot win.
    cost = costs["prefill"]
    ceilings = {shape: prefill_ceiling(cost, shape, req) for shape in shapes}
    best = 0.0
    for shape in sorted(shapes, key=lambda s: -ceilings[s] / s.devices):
        if ceilings[shape] / shape.devices < best:
            break
        if cost.memory(shape, role="prefill").kv_capacity_tokens < req.max_model_len:
            continue  # a bf16 prefill cache (under C8 only decode's is int8) must still hold the longest prompt
        found = prefill_option(cost, shape, req, span, ceilings[shape])
        if found is not None:
            options["prefill"].append(found)
            best = max(best, found.rate_per_device)
    return options


def _best_counts(p: Option, d: Option, budget: int) -> tuple[int, int, float] | None:
    """The prefill and decode counts within `budget` devices with the highest sustained rate (fewest devices on
    ties): for each prefill count, just enough decode instances, or as many as fit."""
    x = np.arange(1, (budget - d.devices) // p.devices + 1)
    if x.size == 0:
        return None
    y = np.minimum((budget - x * p.devices) // d.devices, np.ceil(x * p.rate / d.rate - 1e-9)).astype(int)
    ok = y >= 1
    if not ok.any():
        return None
    x, y = x[ok], y[ok]
    rate = np.minimum(x * p.rate, y * d.rate)
    devices = x * p.devices + y * d.devices
    i = np.lexsort((devices, -rate))[0]
    return int(x[i]), int(y[i]), float(rate[i])


def _fewest(option: Option, rate: float) -> int:
    return math.ceil(rate / option.rate - 1e-9)


def choose(options: dict[str, list[Option]], budget: int, rate: float | None,
           top_k: int = 5, pairs: Callable[[Option, Option], bool] = lambda p, d: True) -> SearchResult | None:
    """With a target `rate`: the fewest devices that sustain it. Without: the most goodput within `budget`.
    `pairs` says which prefill and decode options may serve together."""
    choices: list[Choice] = []
    for p in options["prefill"]:
        for d in (d for d in options["decode"] if pairs(p, d)):
            if rate is None:
                counts = _best_counts(p, d, budget)
                if counts is None:
                    continue
                x, y, sustained = counts
            else:
                x, y = _fewest(p, rate), _fewest(d, rate)
                sustained = min(x * p.rate, y * d.rate)
            devices = x * p.devices + y * d.devices
            if devices <= budget:
                choices.append(Choice("disaggregated", ((p, x), (d, y)), sustained, devices))
    for c in options["colocated"]:
        n = budget // c.devices if rate is None else _fewest(c, rate)
        if n and n * c.devices <= budget:
            choices.append(Choice("colocated", ((c, n),), n * c.rate, n * c.devices))
    if not choices:
        return None
    if rate is None:
        choices.sort(key=lambda c: (-c.rate, c.devices))
    else:
        choices.sort(key=lambda c: (c.devices, -c.rate))
    best_by_kind = {kind: next((c for c in choices if c.kind == kind), None) for kind in ("disaggregated", "colocated")}
    distinct: list[Choice] = []
    seen = set()
    for choice in choices:
        key = (choice.kind, choice.instances[0][0].shape)  # one line per prefill (or colocated) shape
        if key not in seen:
            seen.add(key)
            distinct.append(choice)
    return SearchResult(best=distinct[0], alternatives=distinct[1:top_k + 1],
                        best_disaggregated=best_by_kind["disaggregated"], best_colocated=best_by_kind["colocated"],
                        options=options)


def search(cost: CostModel, req: Requirements, budget: int, rate: float | None,
           progress: Progress | None = None, only: Collection[Shape] | None = None) -> SearchResult:
    """Plan one serving group per SuperPoD when the budget spans several (identical groups), else one group. With a
    target rate, as few groups as carry it. `only` limits the instance shapes."""
    group_budget = min(budget, unit_devices(cost.cluster))
    options = evaluate_options(cost, req, group_budget, progress, only)
    pairs = connector_pairs(cost, req.connector, req.kv_mode)
    if rate is None:
        units = budget // group_budget
        result = choose(options, group_budget, None, pairs=pairs)
    else:
        result, units = None, 0
        while result is None and (units + 1) * group_budget <= budget:
            units += 1
            result = choose(options, group_budget, rate / units, pairs=pairs)
    if result is None:
        need = "the target rate" if rate is not None else "the SLO"
        raise InputError(f"no deployment of {cost.model.id} on {budget} devices meets {need} with the "
                         f"'{cost.cal.name}' calibration", field="--devices",
                         fix="relax --ttft-ms/--tpot-ms, lower --rate, or give more devices")
    result.units = units
    return result
