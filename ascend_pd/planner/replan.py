"""Re-plan a running deployment from what its proxy observed: fit the workload, correct the cost model by the TTFT and
TPOT clients saw, size the deployment's own instance shapes for the observed rate with headroom (the planner's
search, so the answer is what `ascend-pd plan --rate` gives for that workload), and propose the smallest change that
gets there, or nothing when the gain is too small."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ascend_pd.defaults import DECODE_SLOT_UTILISATION
from ascend_pd.deploy import LoadedDeployment
from ascend_pd.deploy.schema import Deployment, Instance
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.on_chip import deployment_group
from ascend_pd.planner.capacity import Option, Requirements
from ascend_pd.planner.observed import MIN_LATENCY_SAMPLES, Observed
from ascend_pd.planner.placement import vllm_args
from ascend_pd.planner.plan import PlanInputs, predict, requirements, settle
from ascend_pd.planner.resize import RoleShape, Step, counts_of, resize, shape_of
from ascend_pd.planner.search import Choice, evaluate_options, search

HEADROOM = 0.2  # the re-plan sizes for the observed rate this much higher, so a slowly rising load does not miss
MIN_GAIN = 0.05  # SLO attainment a change must add, at the design rate, when the deployment misses the SLO
MIN_SAVING = 0.2  # share of devices a change must free when the deployment already meets the SLO
# A smaller deployment must also meet the SLO at the rate this much higher again: shrinking waits for load well below
# what the smaller one carries, growing does not, so a rate that wanders about one boundary does not flap.
SHRINK_MARGIN = 0.5
CORRECTION_ROUNDS = 20  # fixed-point rounds: TPOT grows with the batch it holds, which grows with TPOT
SCALE_LIMITS = (0.05, 20.0)  # observed / estimated beyond these says the wrong model or cluster, not a correction
CORRECTION_WEIGHT = 0.3  # share of a new window's correction against the one before (geometric): one noisy window
# of latencies moves the cost model a little, a lasting change moves it all the way in a few intervals


@dataclass(frozen=True)
class Correction:
    """Observed over estimated time of prefill and decode, found by predicting the running deployment at the
    observed workload until its TTFT and TPOT medians match the observed ones."""

    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    note: str = (f"fewer than {MIN_LATENCY_SAMPLES} streamed requests ended in the window to compare with: the cost "
                 "model as calibrated")
    measured: bool = False  # from observed latencies (now or in an earlier window)

    def as_dict(self) -> dict[str, Any]:
        return {"prefill_scale": self.prefill_scale, "decode_scale": self.decode_scale, "note": self.note}


@dataclass(frozen=True)
class Figures:
    label: str
    devices: int
    predicted: dict[str, Any]  # plan.predict's figures at the design rate


@dataclass
class Proposal:
    observed: Observed | None  # None: no request arrived (an idle deployment shrinking to its minimum)
    design_rate: float
    correction: Correction
    current: Figures | None
    target: Figures | None
    change: bool
    reasons: list[str]
    steps: list[Step] = field(default_factory=list)
    deployment: Deployment | None = None  # after the change
    capacity: list[dict[str, Any]] = field(default_factory=list)  # what each role sustains after each step
    urgent: bool = False  # the running deployment misses the SLO at the observed rate itself, not only with headroom

    def as_dict(self) -> dict[str, Any]:
        return {
            "change": self.change,
            "urgent": self.urgent,
            "reasons": self.reasons,
            "observed": self.observed.describe(),
            "design_rate_rps": self.design_rate,
            "correction": self.correction.as_dict(),
            "current": _figures(self.current),
            "target": _figures(self.target) if self.target else None,
            "steps": [{"action": s.action, "instance": s.instance, "role": s.role, "replaces": s.replaces}
                      for s in self.steps],
            "capacity_during_change": self.capacity,
        }


def _figures(f: Figures) -> dict[str, Any]:
    return {"instances": f.label, "devices": f.devices, **{k: f.predicted[k] for k in (
        "slo_attainment", "goodput_rps", "ttft_ms", "tpot_ms", "rate_rps")}}


def cost_model(loaded: LoadedDeployment, calibration: str | None = None) -> CostModel:
    deployment = loaded.deployment
    cluster = loaded.cluster()
    try:
        model = get_model(deployment.model.name)
    except InputError as exc:
        raise InputError(exc.message, file=loaded.source, field="model.name", fix=exc.fix) from None
    # A re-plan keeps the deployment on its chip: on a cluster that mixes chips, the group its instances run on.
    group = deployment_group(cluster, (p.node for i in deployment.instances for p in i.devices), loaded.source,
                             "a re-plan")
    return CostModel(model, group.chip, group, deployment.model.quantization, deployment.model.kv_cache_dtype,
                     load_calibration(calibration, group.chip.id, deployment.vllm_ascend_version))


def _deployed_option(instance: Instance) -> Option:
    """The running instance as the predictor sees it: its shape and the batch limits it was launched with."""
    args = instance.vllm
    seqs, batched = args.max_num_seqs or 1, args.max_num_batched_tokens or 2048
    if instance.role == "prefill":
        return Option("prefill", shape_of(instance), 0.0, chunk_tokens=batched)
    return Option(instance.role, shape_of(instance), 0.0, batch_per_rank=seqs,
                  chunk_tokens=max(1, batched - seqs) if instance.role == "colocated" else 0)


def deployed_choice(deployment: Deployment) -> Choice:
    """The running deployment as a Choice of its most common shape per role (the predictor holds one shape a role)."""
    roles = ("colocated",) if not deployment.by_role("prefill") else ("prefill", "decode")
    instances = []
    for role in roles:
        members = deployment.by_role(role)
        if not members:
            raise InputError(f"the deployment has prefill instances but no {role} instance", field="instances",
                             fix="re-plan a deployment that serves: P and D, or colocated instances")
        common = Counter(shape_of(i) for i in members).most_common(1)[0][0]
        instances.append((_deployed_option(next(i for i in members if shape_of(i) == common)), len(members)))
    kind = "colocated" if roles == ("colocated",) else "disaggregated"
    return Choice(kind, tuple(instances), 0.0, sum(i.device_count for i in deployment.instances))


def attainment(cost: CostModel, choice: Choice, req: Requirements, budget: int, rate: float) -> dict[str, Any]:
    """plan.predict's figures, with decode held to what its slots carry: predict takes TPOT at the batch a rank
    holds, capped at its sequences, and so misses the queue of requests waiting for a slot past that rate."""
    predicted = predict(cost, choice, 1, req, budget, rate)
    decode = choice.option("decode") or choice.option("colocated")
    ranks = choice.count(decode.role) * decode.shape.dp
    context = req.lengths.mean_decode_context()
    step = cost.tpot(decode.shape, decode.batch_per_rank, context, req.mtp, req.mtp_acceptance)
    carried = ranks * DECODE_SLOT_UTILISATION * decode.batch_per_rank / (float(req.lengths.output_tokens.mean()) * step)
    if rate > carried:
        predicted = {**predicted, "slo_attainment": 0.0, "goodput_rps": 0.0, "decode_carries_rps": carried}
    return predicted


def correct(cost: CostModel, choice: Choice, req: Requirements, observed: Observed, budget: int) -> Correction:
    if observed.ttft is None and observed.tpot is None:
        return Correction()
    scales = [1.0, 1.0]
    for _ in range(CORRECTION_ROUNDS):
        predicted = predict(replace(cost, prefill_scale=scales[0], decode_scale=scales[1]), choice, 1, req, budget,
                            observed.rate)
        ratios = [observed.ttft.p50 / (predicted["ttft_ms"]["p50"] / 1e3) if observed.ttft else 1.0,
                  observed.tpot.p50 / (predicted["tpot_ms"] / 1e3) if observed.tpot else 1.0]
        scales = [min(max(s * r, SCALE_LIMITS[0]), SCALE_LIMITS[1]) for s, r in zip(scales, ratios)]
        if all(abs(r - 1) < 0.01 for r in ratios):
            break
    if any(s in SCALE_LIMITS for s in scales):
        raise InputError(f"the observed latencies are {scales[0]:.3g}x (prefill) and {scales[1]:.3g}x (decode) what "
                         "the cost model gives for this deployment", file=observed.source, field="ttft_seconds",
                         fix="check that --observed is this deployment's proxy, and --calibration its hardware")
    return Correction(scales[0], scales[1], f"TTFT p50 and TPOT p50 of {observed.streamed} streamed requests", True)


def _capacity_during(steps: list[Step], deployment: Deployment, after: Deployment,
                     rates: dict[RoleShape, float]) -> list[dict[str, Any]]:
    """Requests/s the deployment serves while each step runs: a flipped or stopped instance is gone from its drain
    on, a started one counts once it has joined."""
    planned = {i.name: (i.role, shape_of(i)) for i in after.instances}
    live = {i.name: (i.role, shape_of(i)) for i in deployment.instances}
    trail = []
    for step in steps:
        before = _serving_rate(live.values(), rates)
        if step.action in ("flip", "stop"):
            live.pop(step.replaces or step.instance)
        trail.append({"step": step.describe(), "before_rps": before, "rate_rps": _serving_rate(live.values(), rates)})
        if step.action in ("start", "flip"):
            live[step.instance] = planned[step.instance]
    return trail


def _serving_rate(members, rates: dict[RoleShape, float]) -> float:
    by_role: Counter[str] = Counter()
    for key in members:
        by_role[key[0]] += rates.get(key, 0.0)
    pd = min(by_role["prefill"], by_role["decode"])
    return pd if pd > 0 else by_role["colocated"]  # the proxy serves colocated only when no P/D pair is left


def _unsafe(capacity: list[dict[str, Any]], load: float) -> dict[str, Any] | None:
    """The first step that takes the served rate below the load (or below what was served, when that was already
    short of the load)."""
    return next((c for c in capacity if c["rate_rps"] < min(load, c["before_rps"]) - 1e-9), None)


def _option_rates(cost: CostModel, req: Requirements, budget: int, keys) -> dict[RoleShape, float]:
    options = evaluate_options(cost, req, budget, only={shape for _, shape in keys})
    return {(o.role, o.shape): o.rate for role in options for o in options[role]}


@dataclass(frozen=True)
class _Sizing:
    """What a re-plan sizes for: the devices it may take, the design rate and the planner's requirements at it."""

    budget: int
    rate: float
    req: Requirements


@dataclass(frozen=True)
class _Steps:
    """The order of steps to the target, or, when no order is safe, why (`problem`), with no steps and what the last
    order tried would have served."""

    steps: list[Step]
    deployment: Deployment | None
    capacity: list[dict[str, Any]]
    problem: str | None = None


def _sizing(cost: CostModel, deployment: Deployment, observed: Observed, headroom: float, design_rate: float | None,
            max_devices: int | None) -> _Sizing:
    budget = min(cost.cluster.device_count, max_devices or cost.cluster.device_count)
    rate = observed.rate * (1 + headroom) if design_rate is None else max(design_rate, observed.rate)
    workload = observed.workload().model_copy(update={"rate": rate})
    inputs = PlanInputs(workload, deployment.slo, rate=rate, kv_mode=deployment.connector.mode,
                        connector=deployment.connector.implementation, cluster_ref=deployment.cluster)
    return _Sizing(budget, rate, requirements(cost, inputs))


def _correction(cost: CostModel, sizing: _Sizing, deployment: Deployment, observed: Observed,
                prior: Correction) -> Correction:
    """This window's correction of the cost model (`cost`, as calibrated), moved from the earlier windows' (`prior`)
    rather than to it, or `prior` kept when the window cannot tell."""
    req, budget = sizing.req, sizing.budget
    counts = counts_of(deployment)
    serving = _serving_rate(counts.elements(), _option_rates(
        replace(cost, prefill_scale=prior.prefill_scale, decode_scale=prior.decode_scale), req, budget, set(counts)))
    if observed.rate > serving:
        # past what it serves within the SLO, latencies grow with the queues, not with the engines' speed: they
        # would read as slow hardware and shrink every option
        kept = "the earlier windows' correction kept" if prior.measured else "not corrected"
        return replace(prior, note=f"{kept}: {observed.rate:.2f} req/s is past the {serving:.2f} the "
                                   "deployment serves within the SLO, where latencies measure queues")
    found = correct(cost, deployed_choice(deployment), req, observed, budget)
    if prior.measured and not found.measured:  # a window too quiet to tell says nothing new
        return replace(prior, note=f"the earlier windows' correction kept: {found.note}")
    if prior.measured:
        w = CORRECTION_WEIGHT
        return Correction(prior.prefill_scale ** (1 - w) * found.prefill_scale ** w,
                          prior.decode_scale ** (1 - w) * found.decode_scale ** w,
                          f"{found.note}, averaged with the earlier windows'", True)
    return found


def _target_choice(cost: CostModel, sizing: _Sizing, only: set | None) -> Choice:
    """The planner's best choice for the design rate, with every instance count multiplied out by its units."""
    result = search(cost, sizing.req, sizing.budget, sizing.rate, only=only)
    settle(cost, result, sizing.req, sizing.budget, sizing.rate)
    best, units = result.best, result.units
    return replace(best, instances=tuple((o, n * units) for o, n in best.instances), devices=best.devices * units)


def _target(cost: CostModel, sizing: _Sizing, deployment: Deployment) -> tuple[Choice | None, list[str]]:
    """What the plan gives for the design rate, on the deployment's own instance shapes when they can carry it, and
    what to say about it; None when nothing on the cluster meets the SLO."""
    try:
        return _target_choice(cost, sizing, {shape_of(i) for i in deployment.instances}), []
    except InputError:
        pass
    try:
        return _target_choice(cost, sizing, None), [
            "the deployment's instance shapes cannot carry this load on the cluster; other shapes can"]
    except InputError as exc:
        cluster = cost.cluster
        within = f" within {sizing.budget} of its devices" if sizing.budget < cluster.device_count else ""
        return None, [f"nothing on cluster '{cluster.name}'{within} meets the SLO at this load: {exc.message}"]


def _counts(choice: Choice) -> Counter[RoleShape]:
    return Counter({(o.role, o.shape): n for o, n in choice.instances})


def _meets(figures: Figures, required: float) -> bool:
    return figures.predicted["slo_attainment"] >= required - 1e-9


def _why_keep(deployment: Deployment, counts: Counter[RoleShape], current: Figures, target: Figures,
              at_margin: Callable[[float], float], margin_rate: float, min_gain: float, min_saving: float,
              shrink_margin: float) -> str | None:
    """Why the running deployment stays as it is, or None when the change is worth making: one that misses the SLO
    must gain enough attainment, one that meets it must free enough devices and still meet it at `margin_rate`
    (`at_margin(rate)`: the target's attainment there)."""
    required = deployment.slo.attainment
    if counts == counts_of(deployment):
        return "the deployment already has the instances the plan gives for this workload"
    before = current.predicted["slo_attainment"]
    gain = target.predicted["slo_attainment"] - before
    saving = 1 - target.devices / current.devices
    if not _meets(current, required):
        if gain < min_gain:
            return f"the change would raise SLO attainment by {gain:.1%} only (threshold {min_gain:.0%})"
        return None
    if saving < min_saving:
        freed = (f"the plan would free {saving:.0%} of its devices (threshold {min_saving:.0%})" if saving > 0 else
                 f"the plan ({target.label}) would free no device")
        return f"the deployment meets the SLO ({before:.0%} >= {required:.0%}); {freed}"
    margin = at_margin(margin_rate)
    if margin < required - 1e-9:
        return (f"the deployment meets the SLO; the smaller {target.label} would miss it at {margin_rate:.2f} req/s "
                f"({shrink_margin:.0%} shrink margin): {margin:.0%}")
    return None


def _safe_steps(deployment: Deployment, cluster: Cluster, counts: Counter[RoleShape], vllm: dict,
                rates: dict[RoleShape, float], load: float) -> _Steps:
    """Steps to `counts` during which the deployment serves `load` (or what it served, when that was less)."""
    short, capacity = None, []
    for flips in (True, False):  # restarting instances in place is the smaller change; new devices may be safer
        try:
            after, steps = resize(deployment, cluster, counts, vllm, flips)
        except InputError as exc:
            short = short or {"step": "placement", "problem": exc.message}
            continue
        capacity = _capacity_during(steps, deployment, after, rates)
        short = _unsafe(capacity, load)
        if short is None:
            return _Steps(steps, after, capacity)
    problem = short.get("problem") or (f"the deployment would serve {short['rate_rps']:.2f} req/s, below the "
                                       f"{load:.2f} req/s arriving")
    return _Steps([], None, capacity, f"no safe order of steps: during '{short['step']}' {problem}")


def _change_reasons(deployment: Deployment, counts: Counter[RoleShape], current: Figures, target: Figures,
                    rates: dict[RoleShape, float]) -> list[str]:
    misses = not _meets(current, deployment.slo.attainment)
    reasons = [("the deployment misses the SLO" if misses else "the deployment meets the SLO with room to spare")
               + f": predicted attainment {current.predicted['slo_attainment']:.0%} -> "
               f"{target.predicted['slo_attainment']:.0%} on {current.devices} -> {target.devices} devices"]
    running = counts_of(deployment)
    for (role, shape), n in sorted(counts.items(), key=lambda kv: kv[0][0]):
        per = rates.get((role, shape), math.nan)
        reasons.append(f"{role} {shape.label()}: {running.get((role, shape), 0)} -> {n} instances, each "
                       f"sustains {per:.2f} req/s within the SLO at this workload")
    return reasons


def replan(loaded: LoadedDeployment, observed: Observed, calibration: str | None = None, headroom: float = HEADROOM,
           min_gain: float = MIN_GAIN, min_saving: float = MIN_SAVING, shrink_margin: float = SHRINK_MARGIN,
           prior: Correction | None = None, design_rate: float | None = None,
           max_devices: int | None = None) -> Proposal:
    """`prior`: the correction an earlier re-plan found, kept when this window cannot tell (an overloaded
    deployment's latencies are its queues'). `design_rate`: the rate to size for, when a load predictor gives it
    (else the observed rate with `headroom`). `max_devices`: the most the deployment may take of the cluster."""
    deployment = loaded.deployment
    if deployment.slo is None:
        raise InputError("the deployment has no SLO to re-plan for", file=loaded.source, field="slo",
                         fix="add slo: {ttft_ms: ..., tpot_ms: ..., attainment: ...}")
    calibrated = cost_model(loaded, calibration)
    sizing = _sizing(calibrated, deployment, observed, headroom, design_rate, max_devices)
    correction = _correction(calibrated, sizing, deployment, observed, prior or Correction())
    cost = replace(calibrated, prefill_scale=correction.prefill_scale, decode_scale=correction.decode_scale)
    req, budget, rate, required = sizing.req, sizing.budget, sizing.rate, deployment.slo.attainment
    deployed = deployed_choice(deployment)
    current = Figures(deployed.label(), deployed.devices, attainment(cost, deployed, req, budget, rate))
    reasons = [f"observed {observed.describe()}; sized for {rate:.2f} req/s ({rate / observed.rate - 1:.0%} above it)"]
    choice, said = _target(cost, sizing, deployment)
    reasons += said
    if choice is None:
        return Proposal(observed, rate, correction, current, None, False, reasons)
    target = Figures(choice.label(), choice.devices, attainment(cost, choice, req, budget, rate))
    counts = _counts(choice)
    # missing the SLO at the observed rate itself, not only at the design rate
    urgent = attainment(cost, deployed, req, budget, observed.rate)["slo_attainment"] < required - 1e-9
    keep = _why_keep(deployment, counts, current, target,
                     lambda margin_rate: attainment(cost, choice, req, budget, margin_rate)["slo_attainment"],
                     rate + observed.rate * shrink_margin, min_gain, min_saving, shrink_margin)
    if keep is not None:
        return Proposal(observed, rate, correction, current, target, False, [*reasons, keep], urgent=urgent)
    vllm = {(o.role, o.shape): vllm_args(cost, o, req) for o, _ in choice.instances}
    rates = _option_rates(cost, req, budget, set(counts_of(deployment)) | set(counts))
    order = _safe_steps(deployment, cost.cluster, counts, vllm, rates, observed.rate)
    if order.problem is not None:
        return Proposal(observed, rate, correction, current, target, False, [*reasons, order.problem],
                        capacity=order.capacity, urgent=urgent)
    return Proposal(observed, rate, correction, current, target, True,
                    [*reasons, *_change_reasons(deployment, counts, current, target, rates)], order.steps,
                    order.deployment, order.capacity, urgent)
