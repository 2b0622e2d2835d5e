"""Planning a cluster that mixes chips: each chip group is planned as a cluster of its own, priced on its chip, and
the best group's plan wins. P and D of a plan therefore share a chip: vllm-ascend's connectors do not support P
and D on different generations (APD416), and AscendPDConnector never ran across them (APD417)."""

from __future__ import annotations

from dataclasses import replace

from ascend_pd.errors import InputError
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.plan import PlanInputs, PlanOutcome, make_plan
from ascend_pd.planner.search import Progress


def _merit(outcome: PlanOutcome, rate: float | None) -> tuple[float, float]:
    """What makes a plan better, as make_plan judges within a group: with a target rate the fewest devices that
    carry it, else the most goodput (fewer devices on a tie)."""
    predicted = outcome.predicted
    if rate is not None:
        return -predicted["devices"], predicted["goodput_rps"]
    return predicted["goodput_rps"], -predicted["devices"]


def plan_chip_groups(costs: list[CostModel], inputs: PlanInputs,
                     progress: Progress | None = None) -> tuple[CostModel, PlanOutcome]:
    """The best plan over `costs`, one per chip group of a cluster (context.chip_group_costs), and the cost model
    it was priced with. A device budget applies to each group, up to the group's own devices."""
    if len(costs) == 1:
        return costs[0], make_plan(costs[0], inputs, progress)
    total = sum(cost.cluster.device_count for cost in costs)
    name = costs[0].cluster.name
    if inputs.devices and inputs.devices > total:
        raise InputError(f"budget of {inputs.devices} devices exceeds the {total} of cluster '{name}'",
                         field="--devices", fix=f"use at most {total}")
    plans, refusals = [], []
    for cost in costs:
        budget = min(inputs.devices or total, cost.cluster.device_count)
        try:
            plans.append((cost, make_plan(cost, replace(inputs, devices=budget), progress)))
        except InputError as exc:
            if exc.field != "--devices":  # bad input, the same on every group; the others are this group's own
                raise
            refusals.append(f"on its {cost.chip.id} nodes: {exc.message}")
    if not plans:
        raise InputError(f"cluster '{name}' is planned one chip group at a time, and no group has a plan: "
                         + "; ".join(refusals), field="--devices",
                         fix="relax --ttft-ms/--tpot-ms, lower --rate, or add nodes of one chip")
    return max(plans, key=lambda plan: _merit(plan[1], inputs.rate))
