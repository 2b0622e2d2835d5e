"""The autoscaler: on every interval observe the proxy, re-plan, and apply a change once it has been proposed the
same way on `agree` intervals in a row and `cooldown` seconds have passed since the last one, so load that is steady
but noisy never makes the deployment flap. Its decisions are Prometheus metrics."""

from __future__ import annotations

import signal
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

from ascend_pd.autoscale.bounds import clamp, minimum, resize_to, within
from ascend_pd.autoscale.control_plane import ControlPlane, TableStore
from ascend_pd.autoscale.predictor import make_predictor
from ascend_pd.autoscale.proxy_admin import Interrupted, StepFailed
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import AutoscaleSettings, RolloutTimeouts
from ascend_pd.deploy import load_deployment, revision_of
from ascend_pd.deploy.schema import Deployment
from ascend_pd.errors import InputError
from ascend_pd.planner.observed import parse_observed, read_observed_document
from ascend_pd.planner.replan import Correction, Proposal, replan
from ascend_pd.planner.resize import counts_of
from ascend_pd.proxy.endpoints import endpoints_from_deployment

DECISIONS = ("hold", "wait", "apply", "applied", "failed", "unobservable")


class AutoscaleMetrics:
    def __init__(self, registry=None):
        from prometheus_client import CollectorRegistry, Counter as PromCounter, Gauge

        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = PromCounter("ascend_pd_autoscale_decisions", "what each interval decided: hold (nothing "
                                     "to change), wait (a change waits for agreement or the cooldown), apply, "
                                     "applied, failed (a rollout step failed), unobservable", ["decision"], registry=r)
        self.instances = Gauge("ascend_pd_autoscale_instances", "instances of the running deployment", ["role"],
                               registry=r)
        self.planned = Gauge("ascend_pd_autoscale_planned_instances", "instances the last re-plan wants", ["role"],
                             registry=r)
        self.observed_rate = Gauge("ascend_pd_autoscale_observed_rate_rps", "arrival rate the proxy replicas "
                                   "measured", registry=r)
        self.design_rate = Gauge("ascend_pd_autoscale_design_rate_rps", "the rate the load predictor sizes for",
                                 registry=r)
        self.attainment = Gauge("ascend_pd_autoscale_predicted_slo_attainment", "predicted at the design rate",
                                ["deployment"], registry=r)
        self.correction = Gauge("ascend_pd_autoscale_cost_correction", "observed / estimated time", ["phase"],
                                registry=r)
        self.last_change = Gauge("ascend_pd_autoscale_last_change_timestamp_seconds", "when the last change ended",
                                 registry=r)
        for decision in DECISIONS:
            self.decisions.labels(decision)

    def record(self, decision: str, deployment_counts: Counter, proposal: Proposal | None) -> None:
        self.decisions.labels(decision).inc()
        for role in ("prefill", "decode", "colocated"):
            self.instances.labels(role).set(sum(n for (r, _), n in deployment_counts.items() if r == role))
        if proposal is None:
            return
        self.design_rate.set(proposal.design_rate)
        if proposal.observed is not None:
            self.observed_rate.set(proposal.observed.rate)
            self.attainment.labels("running").set(proposal.current.predicted["slo_attainment"])
            self.correction.labels("prefill").set(proposal.correction.prefill_scale)
            self.correction.labels("decode").set(proposal.correction.decode_scale)
        if proposal.target is not None:
            self.attainment.labels("planned").set(proposal.target.predicted["slo_attainment"])
        planned = counts_of(proposal.deployment) if proposal.deployment is not None else deployment_counts
        for role in ("prefill", "decode", "colocated"):
            self.planned.labels(role).set(sum(n for (r, _), n in planned.items() if r == role))


class Autoscaler:
    """`proxies`: the base URL of every proxy replica (their control plane owns the backend table), or one file
    holding a saved GET /v1/workload answer (observe only: nothing to act on but the deployment file)."""

    def __init__(self, deployment_file: Path, proxies: list[str] | str, token: str | None, launcher: Launcher,
                 settings: AutoscaleSettings, log: RolloutLog, metrics: AutoscaleMetrics | None = None,
                 timeouts: RolloutTimeouts = RolloutTimeouts(), clock: Callable[[], float] = time.monotonic,
                 store: TableStore | None = None):
        self.deployment_file = deployment_file
        sources = [proxies] if isinstance(proxies, str) else list(proxies)
        self.saved_window = next((s for s in sources if not s.startswith(("http://", "https://"))), None)
        self.settings = settings
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self.plane = ControlPlane([s for s in sources if s != self.saved_window], token, store)
        self.rollout = Rollout(deployment_file, self.plane, launcher, log, timeouts)
        self.predictor = make_predictor(settings.predictor, settings.headroom)
        self._pending: tuple[frozenset, int] | None = None  # (planned counts, intervals in a row)
        self._last_change: float | None = None
        self._last_from: frozenset | None = None  # the counts the last change left
        # per deployment kind (colocated, disaggregated): one kind's latencies say nothing of the other's engines
        self._corrections: dict[str, Correction] = {}
        self._idle = 0  # windows in a row with no arrival

    def tick(self) -> str:
        """One interval: reconcile, observe, re-plan, maybe apply. Returns the decision (one of DECISIONS)."""
        loaded = load_deployment(self.deployment_file)
        counts = counts_of(loaded.deployment)
        try:
            self._reconcile(loaded)
            document = self._observe()
        except (InputError, StepFailed) as exc:
            return self._decided("unobservable", counts, None, error=_said(exc))
        if document.get("requests") == 0 and not document.get("partial"):
            return self._idle_tick(loaded, counts)
        self._idle = 0
        try:
            observed = parse_observed(document, self.saved_window or "the proxy replicas")
            self.predictor.update(time.time(), observed.rate)
            kind = _kind(loaded.deployment)
            s = self.settings
            proposal = replan(loaded, observed, s.calibration, s.headroom, s.min_gain, s.min_saving, s.shrink_margin,
                              self._corrections.get(kind), self.predictor.design_rate(), s.bounds.max_devices)
        except InputError as exc:
            return self._decided("unobservable", counts, None, error=exc.render())
        self._corrections[kind] = proposal.correction
        if proposal.change and not within(counts_of(proposal.deployment), self.settings.bounds):
            proposal = self._bound(loaded, proposal)
        if observed.partial and proposal.urgent:  # a worker or replica watched less than the window: not a verdict
            proposal = replace(proposal, urgent=False, reasons=[
                *proposal.reasons, "a proxy worker or replica restarted within the window: not urgent"])
        if not proposal.change:
            self._pending = None
            return self._decided("hold", counts, proposal)
        return self._agreed_then_applied(loaded, counts, proposal, proposal.urgent)

    def _reconcile(self, loaded) -> None:
        """What the deployment file says runs does: an instance that does not answer is launched again (its
        launchers start only what is not running), the backend table says what the file says, and every replica
        serves it. Observing a saved window acts on nothing."""
        if not self.plane.replicas:
            return
        relaunched = self.rollout.relaunch_missing(loaded.deployment)
        if relaunched:
            self.log.write(phase="reconcile", status="relaunched", output=relaunched)
        said = self.plane.reconcile(endpoints_from_deployment(loaded), revision_of(loaded.deployment))
        if said:
            self.log.write(phase="reconcile", status="ok", output=said)

    def _observe(self) -> dict:
        if self.saved_window is not None:
            return read_observed_document(self.saved_window, "--proxy")
        return self.plane.workload()

    def _bound(self, loaded, proposal: Proposal) -> Proposal:
        """The proposal with its target held within the bounds (the bounded one may be no change at all)."""
        counts = clamp(counts_of(proposal.deployment), self.settings.bounds)
        moved = resize_to(loaded.deployment, loaded.cluster(), counts, proposal.deployment)
        reasons = [*proposal.reasons, f"held within the bounds: {_label(counts)}"]
        if moved is None:
            return replace(proposal, change=False, steps=[], deployment=None, reasons=reasons)
        deployment, steps = moved
        return replace(proposal, deployment=deployment, steps=steps, reasons=reasons)

    def _idle_tick(self, loaded, counts: Counter) -> str:
        """No request arrived in a whole window: after `agree` such windows, shrink to the bounds' minimum."""
        self._idle += 1
        self.predictor.update(time.time(), 0.0)
        fewest = minimum(loaded.deployment, self.settings.bounds)
        moved = resize_to(loaded.deployment, loaded.cluster(), fewest)
        if moved is None:
            self._pending = None
            return self._decided("hold", counts, None, reasons=["idle, at the minimum"])
        proposal = Proposal(observed=None, design_rate=0.0, correction=Correction(), current=None, target=None,
                            change=True, reasons=[f"no request in {self._idle} windows in a row: shrink to the "
                                                  f"minimum, {_label(fewest)}"],
                            steps=moved[1], deployment=moved[0])
        return self._agreed_then_applied(loaded, counts, proposal, False)

    def _agreed_then_applied(self, loaded, counts: Counter, proposal: Proposal, urgent: bool) -> str:
        planned = frozenset(counts_of(proposal.deployment).items())
        agreed = self._pending[1] + 1 if self._pending and self._pending[0] == planned else 1
        self._pending = (planned, agreed)
        now = self.clock()
        since = None if self._last_change is None else now - self._last_change
        cooling = since is not None and since < self.settings.cooldown
        # going straight back to what the last change left: wait longer, unless the SLO is missed now
        reversing = (since is not None and planned == self._last_from and since < self.settings.reversal_hold
                     and not urgent)
        needed = 1 if urgent else self.settings.agree
        if agreed < needed or cooling or reversing or self.settings.dry_run:
            why = ("dry run" if self.settings.dry_run else "cooldown" if cooling
                   else f"it would undo the change of {since:.0f} s ago" if reversing
                   else f"proposed {agreed} of {needed} intervals in a row")
            return self._decided("wait", counts, proposal, why=why)
        self._decided("apply", counts, proposal)
        after = self.rollout.run(loaded.deployment, proposal.deployment, proposal.steps)
        self._last_change = self.clock()
        self._last_from = frozenset(counts.items())
        self._pending = None
        done = counts_of(after) == counts_of(proposal.deployment)
        if self.metrics is not None:
            self.metrics.last_change.set(time.time())
        return self._decided("applied" if done else "failed", counts_of(after), proposal)

    def _decided(self, decision: str, counts: Counter, proposal: Proposal | None, **extra) -> str:
        entry = {"phase": "decision", "decision": decision, **extra}
        if proposal is not None:
            entry.update(reasons=proposal.reasons, urgent=proposal.urgent)
            if proposal.observed is not None:
                entry.update(observed_rate_rps=round(proposal.observed.rate, 3),
                             design_rate_rps=round(proposal.design_rate, 3), running=proposal.current.label,
                             correction=proposal.correction.as_dict(),
                             planned=proposal.target.label if proposal.target else None)
        self.log.write(**entry)
        if self.metrics is not None:
            self.metrics.record(decision, counts, proposal)
        return decision

    def run(self, intervals: int | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        """Tick every interval (forever, or `intervals` times); the interval counts from the start of each tick."""
        done = 0
        while intervals is None or done < intervals:
            started = self.clock()
            self.tick()
            done += 1
            if intervals is None or done < intervals:
                sleep(max(0.0, self.settings.interval - (self.clock() - started)))


def _kind(deployment: Deployment) -> str:
    return "disaggregated" if deployment.by_role("prefill") else "colocated"


def _label(counts: Counter) -> str:
    return " + ".join(f"{n} {role} {shape.label()}" for (role, shape), n in sorted(counts.items(),
                                                                                 key=lambda kv: kv[0][0]))


def _said(exc: Exception) -> str:
    return exc.render() if isinstance(exc, InputError) else str(exc)


@contextmanager
def stopping_on_signals(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """The first SIGINT or SIGTERM raises Interrupted where the loop is, so a rollout in progress ends as at a failed
    step (a drained instance back in service, a new one stopped, the deployment file saying what runs); a second one
    acts as it would without this (a hard stop)."""
    previous = {number: signal.getsignal(number) for number in signals}

    def interrupt(number: int, _frame) -> None:
        for each, handler in previous.items():
            signal.signal(each, handler)
        raise Interrupted(f"stopped by {signal.Signals(number).name}")

    for number in signals:
        signal.signal(number, interrupt)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
