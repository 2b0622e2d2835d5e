"""Applying a re-plan to a running deployment without losing a request: a new instance starts from the rendered
launchers, joins the proxy once every endpoint answers /health; an instance that leaves is drained through the
proxy's admin API, waits for its last request (a prefill instance also until decode has its KV), leaves the proxy,
then stops. Each phase is a JSON line in the log; a phase that fails stops the rollout, puts back what it took from
the proxy (a flip: the instance it stopped), stops an instance the proxy will not take, and leaves the deployment
file and the bundle describing what runs."""

from __future__ import annotations

import difflib
import json
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

from ascend_pd.autoscale.engine_kv import wait_kv_released
from ascend_pd.autoscale.proxy_admin import Interrupted, ProxyAdmin, StepFailed, not_answering, wait_healthy
from ascend_pd.autoscale.settings import DEFAULT_KUBECTL, DEFAULT_NODE_COMMAND, RolloutTimeouts
from ascend_pd.deploy import LoadedDeployment, dump_deployment, parse_deployment, write_deployment
from ascend_pd.deploy.handoff import ABORT_TIMEOUT_S
from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT
from ascend_pd.deploy.schema import Deployment, Instance
from ascend_pd.planner.resize import Step
from ascend_pd.proxy.endpoints import Endpoint, endpoints_from_deployment
from ascend_pd.render.bundle import RenderOptions, render_bundle, write_bundle
from ascend_pd.render.k8s import TABLE_MANIFEST
from ascend_pd.render.processes import LaunchPlan, plan_processes

@dataclass
class RolloutLog:
    """One JSON object per line: time, step, phase, status and what happened."""

    stream: TextIO
    lines: list[dict] = field(default_factory=list)

    def write(self, **entry) -> None:
        entry = {"time": round(time.time(), 3), **entry}
        self.lines.append(entry)
        self.stream.write(json.dumps(entry) + "\n")
        self.stream.flush()


class Launcher:
    """Starts and stops instances of the bundle in `bundle`: `bash` runs launch-<node>.sh / stop-<node>.sh with the
    instance's process names through the node command (`ssh {host}` by default), at the bundle's path on the node:
    a shared file system, or the copy command run here before every start (the bundle was just rewritten); `k8s`
    applies or deletes the instance's manifest with kubectl."""

    def __init__(self, bundle: Path, target: str = "bash", node_command: str = DEFAULT_NODE_COMMAND,
                 kubectl: str = DEFAULT_KUBECTL, timeout: float = RolloutTimeouts.command, copy_command: str = ""):
        self.bundle = bundle.resolve()
        self.target = target
        self.node_command = node_command
        self.kubectl = kubectl
        self.timeout = timeout
        self.copy_command = copy_command

    def _run(self, argv: list[str]) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise StepFailed(f"`{shlex.join(argv)}` did not finish within {self.timeout:g} s") from None
        except OSError as exc:
            raise StepFailed(f"`{shlex.join(argv)}` could not run: {exc}") from None
        if done.returncode:
            tail = (done.stderr or done.stdout).strip()[-400:]
            raise StepFailed(f"`{shlex.join(argv)}` exited {done.returncode}: {tail}")
        return done.stdout.strip()[-400:]

    def _on_node(self, plan: LaunchPlan, node: str, script: str, names: list[str]) -> list[str]:
        host = plan.cluster.node(node).host_ip
        prefix = shlex.split(self.node_command.format(host=host, node=node))
        return [*prefix, "bash", str(self.bundle / script), *names]

    def _copy_to(self, plan: LaunchPlan, node: str) -> None:
        if self.copy_command:
            host = plan.cluster.node(node).host_ip
            self._run(shlex.split(self.copy_command.format(bundle=self.bundle, host=host, node=node)))

    def start(self, plan: LaunchPlan, instance: str) -> list[str]:
        if self.target == "k8s":
            return [self._run([*shlex.split(self.kubectl), "apply", "-f", str(self.bundle / "k8s/configmap.yaml"),
                               "-f", str(self.bundle / f"k8s/{instance}.yaml")])]
        said = []
        for node in plan.instance_nodes(instance):
            self._copy_to(plan, node)
            said.append(self._run(self._on_node(plan, node, f"launch-{node}.sh",
                                                [p.name for p in plan.instance_processes(instance, node)])))
        return said

    def stop(self, plan: LaunchPlan, instance: str) -> list[str]:
        if self.target == "k8s":
            manifest = self.bundle / f"k8s/{instance}.yaml"
            said = self._run([*shlex.split(self.kubectl), "delete", "--ignore-not-found", "-f", str(manifest)])
            manifest.unlink(missing_ok=True)  # so `kubectl apply -f k8s/` cannot bring it back
            return [said]
        return [self._run(self._on_node(plan, node, f"stop-{node}.sh",
                                        [p.name for p in plan.instance_processes(instance, node)]))
                for node in plan.instance_nodes(instance)]


def _each(action: Callable[[str], object], urls: list[str]) -> None:
    for url in urls:
        action(url)


def _every(action: Callable[[str], object], urls: list[str]) -> None:
    """`action` on each of `urls`, the rest too when one fails (cleanup); StepFailed naming those that failed."""
    failed: list[StepFailed] = []
    for url in urls:
        try:
            action(url)
        except StepFailed as exc:
            failed.append(exc)
    if failed:
        raise next((e for e in failed if isinstance(e, Interrupted)), StepFailed("; ".join(map(str, failed))))


def _instance(deployment: Deployment, name: str) -> Instance:
    return next(i for i in deployment.instances if i.name == name)


def _loaded(deployment: Deployment, path: Path) -> LoadedDeployment:
    return parse_deployment(dump_deployment(deployment), str(path))


class Rollout:
    """Moves the deployment in `deployment_file` (whose bundle `launcher` runs) to `target` through `steps`."""

    def __init__(self, deployment_file: Path, proxy: ProxyAdmin, launcher: Launcher, log: RolloutLog,
                 timeouts: RolloutTimeouts = RolloutTimeouts(), render: RenderOptions | None = None):
        self.deployment_file = deployment_file
        self.proxy = proxy
        self.launcher = launcher
        self.log = log
        self.timeouts = timeouts
        self.render = render or RenderOptions(target=launcher.target)
        self._running: dict[str, Instance] = {}  # during run(): what runs now, by name
        self._interrupted: Interrupted | None = None  # told to stop: kept through cleanup that swallows failures

    def _write(self, deployment: Deployment, deployment_file: bool = True) -> LaunchPlan:
        """Render `deployment` into the bundle (and make it the deployment file); its launch plan. Files of nodes it
        no longer uses stay: their stop scripts still stop what runs there."""
        loaded = _loaded(deployment, self.deployment_file)
        rendered = render_bundle(loaded, self.render)
        if rendered.refused:
            first = next(d for d in rendered.diagnostics if d.severity == "error")
            raise StepFailed(f"the changed deployment does not validate: {first.code} {first.message}")
        # the deployment file is written below, once what runs is known; the backend table's ConfigMap is the control
        # plane's (rendered empty, it would hide the table from `kubectl apply -f k8s/`)
        kept = (BUNDLE_DEPLOYMENT, f"k8s/{TABLE_MANIFEST}")
        # the bundle's secrets are kept, so the instances it starts agree with the running ones
        write_bundle({k: v for k, v in rendered.files.items() if k not in kept}, self.launcher.bundle,
                     rendered.k8s_deployment)
        if deployment_file:
            write_deployment(deployment, self.deployment_file)
        return plan_processes(loaded, self.render.interface)

    def _endpoints(self, deployment: Deployment, instance: str) -> list[Endpoint]:
        return [e for e in endpoints_from_deployment(_loaded(deployment, self.deployment_file))
                if e.instance == instance]

    def _note(self, exc: StepFailed) -> None:
        if isinstance(exc, Interrupted) and self._interrupted is None:
            self._interrupted = exc

    def _phase(self, step: Step, phase: str, action: Callable[[], object]) -> object:
        started = time.monotonic()
        try:
            result = action()
        except StepFailed as exc:
            self._note(exc)
            self.log.write(step=step.describe(), phase=phase, status="failed", error=str(exc),
                           seconds=round(time.monotonic() - started, 3))
            raise
        self.log.write(step=step.describe(), phase=phase, status="ok", seconds=round(time.monotonic() - started, 3),
                       **({"output": result} if isinstance(result, list) and any(result) else {}))
        return result

    def _best_effort(self, step: Step, phase: str, action: Callable[[], object]) -> None:
        """A cleanup phase: its failure is logged and does not hide the failure that called for it."""
        try:
            self._phase(step, phase, action)
        except StepFailed:
            pass

    def _join(self, step: Step, plan: LaunchPlan, instance: str, endpoints: list[Endpoint],
              listed: Sequence[str] = (), prefix: str = "") -> None:
        """Add `endpoints` to the proxy. One the proxy refuses (or cannot be reached for) leaves the instance on
        devices yet serving nothing: whatever of it the proxy may list (`listed`: what it listed before) leaves it,
        the instance stops, and it no longer runs, as the deployment file will then say."""
        tried: list[str] = []

        def add() -> None:
            for e in endpoints:
                tried.append(e.url)  # before the call: an add that failed may have landed (on some proxy replicas)
                self.proxy.add(e.url, e.role, e.instance, e.dp_rank, e.kv)
        try:
            self._phase(step, prefix + "join", add)
        except StepFailed:
            self._best_effort(step, prefix + "unjoin", lambda: self._unjoin([*listed, *tried]))
            self._best_effort(step, prefix + "stop-unjoined", lambda: self.launcher.stop(plan, instance))
            self._running.pop(instance, None)
            raise

    def _unjoin(self, urls: list[str]) -> None:
        """Take those of `urls` the proxy lists out of it (asking first: one never added is no failure)."""
        listed = self.proxy.backends()
        _every(self.proxy.remove, [url for url in dict.fromkeys(urls) if url in listed])

    def _bring_up(self, step: Step, plan: LaunchPlan, deployment: Deployment, instance: str,
                  prefix: str = "") -> None:
        endpoints = self._endpoints(deployment, instance)
        try:  # a launch that failed half-way may have started some of its processes: stop them too
            self._phase(step, prefix + "launch", lambda: self.launcher.start(plan, instance))
            self._phase(step, prefix + "healthy",
                        lambda: wait_healthy([e.url for e in endpoints], self.timeouts.start))
        except StepFailed:
            self._phase(step, prefix + "stop-unhealthy", lambda: self.launcher.stop(plan, instance))
            raise
        self._join(step, plan, instance, endpoints, prefix=prefix)
        self._running[instance] = _instance(deployment, instance)

    def _retire(self, step: Step, plan: LaunchPlan, deployment: Deployment, instance: str) -> None:
        endpoints = self._endpoints(deployment, instance)
        urls = [e.url for e in endpoints]
        try:  # a drain that failed half-way drained some endpoints: the put-back below covers them too
            self._phase(step, "drain", lambda: _each(self.proxy.drain, urls))
            self._phase(step, "idle", lambda: self.proxy.wait_idle(urls, self.timeouts.drain))
            if _instance(deployment, instance).role == "prefill":
                # P's answer is not the end of a request: D reads (or P still pushes) its KV afterwards, so P stops
                # only once it holds none. Checked while the proxy still lists it (drained, routed nothing): the
                # listing shows it as leaving until nothing of it is used, and a timeout only has to undrain it.
                self._phase(step, "kv-released",
                            lambda: [wait_kv_released(urls, self.timeouts.drain, ABORT_TIMEOUT_S)])
            self._phase(step, "leave", lambda: _each(self.proxy.remove, urls))
            self._phase(step, "stop", lambda: self.launcher.stop(plan, instance))
        except StepFailed:
            # it keeps serving, as the deployment file will say: the proxy gets every endpoint back (or, if it will
            # not take them, the instance stops and the file says that instead)
            self._join(step, plan, instance, endpoints, listed=urls)
            raise
        self._running.pop(instance, None)

    def _restore(self, step: Step, current: Deployment, target: Deployment) -> None:
        """A flip whose new instance did not come up: the instance it replaced starts again on its devices, from
        launchers rendered for what runs with it back. If that fails too, neither runs, as the file will say."""
        old = step.replaces
        # rendered from what runs, not all of `current`: a k8s manifest an earlier flip deleted must not come back
        self._running[old] = _instance(current, old)
        try:
            plan = self._phase(step, "restore-render",
                               lambda: self._write(self._now(current, target), deployment_file=False))
            self._bring_up(step, plan, current, old, prefix="restore-")
        except StepFailed as exc:
            self._note(exc)
            self._running.pop(old, None)
            self.log.write(step=step.describe(), phase="restore", status="failed", error=str(exc))
            return
        self.log.write(step=step.describe(), phase="restore", status="ok")

    def _apply(self, step: Step, old_plan: LaunchPlan, plan: LaunchPlan, current: Deployment,
               target: Deployment) -> None:
        # the target's launchers start the new instances by name; an old one stops by its names in the old plan
        # (a stop script stops whatever it is named, so the one already on its node serves)
        if step.action in ("flip", "stop"):
            self._retire(step, old_plan, current, step.replaces or step.instance)
        if step.action in ("start", "flip"):
            try:
                self._bring_up(step, plan, target, step.instance)
            except StepFailed:
                if step.action == "flip":
                    self._restore(step, current, target)
                raise

    def _now(self, current: Deployment, target: Deployment) -> Deployment:
        """What runs, as a deployment: the target's settings, the running instances in their order."""
        order = [name for name in [*(i.name for i in current.instances), *(i.name for i in target.instances)]
                 if name in self._running]
        return target.model_copy(update={"instances": [self._running[name] for name in dict.fromkeys(order)]})

    def run(self, current: Deployment, target: Deployment, steps: list[Step]) -> Deployment:
        """Apply `steps`; the deployment that runs afterwards (all of `target`, or as far as the steps got). The
        deployment file and the bundle describe it either way."""
        self._running = {i.name: i for i in current.instances}
        self._interrupted = None  # told to stop: say what runs first, then stop the loop
        old_plan = plan_processes(_loaded(current, self.deployment_file), self.render.interface)
        self.log.write(phase="plan", status="ok", steps=[s.describe() for s in steps],
                       **({"manifest_diff": self._diff(current, target)} if self.launcher.target == "k8s" else {}))
        try:
            plan = self._write(target, deployment_file=False)
            for step in steps:
                self._apply(step, old_plan, plan, current, target)
                self.log.write(step=step.describe(), phase="done", status="ok")
        except StepFailed as exc:
            self.log.write(phase="rollout", status="failed", error=str(exc))
            self._note(exc)
        result = self._now(current, target)
        try:
            self._write(result)
        except StepFailed as exc:  # what runs was valid when it started: say so, and keep the loop alive
            self.log.write(phase="write", status="failed", error=str(exc))
            self._note(exc)
        if self._interrupted is not None:
            raise self._interrupted
        return result

    def relaunch_missing(self, deployment: Deployment) -> list[str]:
        """Start again every instance the deployment file says runs of which an endpoint does not answer /health:
        the rendered launchers start only the processes not already running (one still loading its weights is left
        alone), and kubectl apply leaves a running one as it is. What each launch said."""
        silent = set(not_answering([e.url for e in endpoints_from_deployment(_loaded(deployment,
                                                                                      self.deployment_file))]))
        if not silent:
            return []
        loaded = _loaded(deployment, self.deployment_file)
        plan = plan_processes(loaded, self.render.interface)
        said = []
        for e in endpoints_from_deployment(loaded):
            if e.url in silent and not any(line.startswith(f"{e.instance}:") for line in said):
                try:
                    said.append(f"{e.instance}: " + " ".join(self.launcher.start(plan, e.instance)))
                except StepFailed as exc:
                    said.append(f"{e.instance}: {exc}")
        return said

    def _diff(self, current: Deployment, target: Deployment) -> str:
        def manifests(deployment: Deployment) -> list[str]:
            files = render_bundle(_loaded(deployment, self.deployment_file), RenderOptions(target="k8s")).files
            return "".join(f"# {name}\n{text}" for name, text in files.items() if name.startswith("k8s/")).splitlines(
                keepends=True)
        return "".join(difflib.unified_diff(manifests(current), manifests(target), "running", "planned"))
