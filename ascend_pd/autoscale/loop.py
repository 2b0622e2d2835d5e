"""The autoscaler: on every interval observe the proxy, re-plan, and apply a change once it has been proposed the
same way on `agree` intervals in a row and `cooldown` seconds have passed since the last one, so load that is steady
but noisy never makes the deployment flap. Its decisions are Prometheus metrics."""

from __future__ import annotations

import signal
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ascend_pd.autoscale.observe import observe
from ascend_pd.autoscale.proxy_admin import Interrupted, ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import AutoscaleSettings, Timeouts
from ascend_pd.deploy import load_deployment
from ascend_pd.errors import InputError
from ascend_pd.planner.replan import Correction, Proposal, replan
from ascend_pd.planner.resize import counts_of

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
        self.observed_rate = Gauge("ascend_pd_autoscale_observed_rate_rps", "arrival rate the proxy measured",
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
        self.observed_rate.set(proposal.observed.rate)
        self.attainment.labels("running").set(proposal.current.predicted["slo_attainment"])
        if proposal.target is not None:
            self.attainment.labels("planned").set(proposal.target.predicted["slo_attainment"])
        self.correction.labels("prefill").set(proposal.correction.prefill_scale)
        self.correction.labels("decode").set(proposal.correction.decode_scale)
        planned = counts_of(proposal.deployment) if proposal.deployment is not None else deployment_counts
        for role in ("prefill", "decode", "colocated"):
            self.planned.labels(role).set(sum(n for (r, _), n in planned.items() if r == role))


class Autoscaler:
    def __init__(self, deployment_file: Path, proxy_url: str, token: str | None, launcher: Launcher,
                 settings: AutoscaleSettings, log: RolloutLog, metrics: AutoscaleMetrics | None = None,
                 timeouts: Timeouts = Timeouts(), clock: Callable[[], float] = time.monotonic):
        self.deployment_file = deployment_file
        self.proxy_url = proxy_url
        self.token = token
        self.settings = settings
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self.rollout = Rollout(deployment_file, ProxyAdmin(proxy_url, token), launcher, log, timeouts)
        self._pending: tuple[frozenset, int] | None = None  # (planned counts, intervals in a row)
        self._last_change: float | None = None
        self._correction: Correction | None = None  # the last re-plan's, for windows that cannot tell

    def tick(self) -> str:
        """One interval: observe, re-plan, maybe apply. Returns the decision (one of DECISIONS)."""
        loaded = load_deployment(self.deployment_file)
        counts = counts_of(loaded.deployment)
        try:
            observed = observe(self.proxy_url, self.token)
            s = self.settings
            proposal = replan(loaded, observed, s.calibration, s.headroom, s.min_gain, s.min_saving, s.shrink_margin,
                              self._correction)
        except InputError as exc:
            return self._decided("unobservable", counts, None, error=exc.render())
        self._correction = proposal.correction
        if not proposal.change:
            self._pending = None
            return self._decided("hold", counts, proposal)
        planned = frozenset(counts_of(proposal.deployment).items())
        agreed = self._pending[1] + 1 if self._pending and self._pending[0] == planned else 1
        self._pending = (planned, agreed)
        cooling = self._last_change is not None and self.clock() - self._last_change < self.settings.cooldown
        needed = 1 if proposal.urgent else self.settings.agree
        if agreed < needed or cooling or self.settings.dry_run:
            why = ("dry run" if self.settings.dry_run else "cooldown" if cooling
                   else f"proposed {agreed} of {needed} intervals in a row")
            return self._decided("wait", counts, proposal, why=why)
        self._decided("apply", counts, proposal)
        after = self.rollout.run(loaded.deployment, proposal.deployment, proposal.steps)
        self._last_change = self.clock()
        self._pending = None
        done = counts_of(after) == counts_of(proposal.deployment)
        if self.metrics is not None:
            self.metrics.last_change.set(time.time())
        return self._decided("applied" if done else "failed", counts_of(after), proposal)

    def _decided(self, decision: str, counts: Counter, proposal: Proposal | None, **extra) -> str:
        entry = {"phase": "decision", "decision": decision, **extra}
        if proposal is not None:
            entry.update(reasons=proposal.reasons, observed_rate_rps=round(proposal.observed.rate, 3),
                         running=proposal.current.label, urgent=proposal.urgent,
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
