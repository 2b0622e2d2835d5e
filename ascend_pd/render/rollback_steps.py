"""What a rollback changes in the running deployment: the instances it adds, removes and resizes, and the commands
that make what runs follow the restored bundle (its launch and stop scripts for bash, kubectl for Kubernetes), in an
order that keeps requests served where the devices allow: stop only what is in the way, start what is new, point the
proxy at it, then stop what left."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ascend_pd.deploy import LoadedDeployment
from ascend_pd.deploy.schema import Deployment, Instance
from ascend_pd.render.k8s import object_name
from ascend_pd.render.processes import LaunchPlan, Process, plan_processes
from ascend_pd.render.revisions import bundle_files
from ascend_pd.render.shell import quote


def shape(instance: Instance) -> str:
    """`prefill, tp 2 dp 1 on a2-00 [0, 1]`: what an instance runs and where."""
    p = instance.parallel
    sizes = f"tp {p.tp} dp {p.dp}" + (f" pp {p.pp}" if p.pp > 1 else "") + (f" ep {p.ep}" if p.ep > 1 else "")
    where = ", ".join(f"{d.node} {d.devices}" for d in instance.devices)
    return f"{instance.role}, {sizes} on {where}"


@dataclass(frozen=True)
class InstanceChanges:
    added: list[Instance]
    removed: list[Instance]
    resized: list[tuple[Instance, Instance]]  # (before, after), same name, another shape or settings

    def lines(self) -> list[str]:
        said = [f"  added    {i.name}: {shape(i)}" for i in self.added]
        said += [f"  removed  {i.name}: {shape(i)}" for i in self.removed]
        for before, after in self.resized:
            word = "resized " if shape(before) != shape(after) else "changed "
            said.append(f"  {word} {after.name}: {shape(before)} -> {shape(after)}")
        return said or ["  none: the instances are the same"]


def instance_changes(before: Deployment, after: Deployment) -> InstanceChanges:
    old = {i.name: i for i in before.instances}
    new = {i.name: i for i in after.instances}
    return InstanceChanges(added=[i for n, i in new.items() if n not in old],
                           removed=[i for n, i in old.items() if n not in new],
                           resized=[(old[n], i) for n, i in new.items() if n in old and old[n] != i])


@dataclass(frozen=True)
class ProcessChanges:
    """Processes by name: those only the restored bundle runs, those only the replaced one ran, and those both run
    with another command line or place (stopped, then started again)."""

    start: list[Process]
    stop: list[Process]
    restart: list[tuple[Process, Process]]  # (replaced, restored)

    def in_the_way(self) -> list[Process]:
        """Processes that leave and hold a device or port of the same node that a starting one needs: they stop
        first, the others only once the proxy has left them."""
        starting = self.start + [new for _, new in self.restart]
        return [old for old in self.stop if any(_clash(old, new) for new in starting)]


def process_changes(before: LaunchPlan, after: LaunchPlan) -> ProcessChanges:
    old = {p.name: p for p in before.processes()}
    new = {p.name: p for p in after.processes()}
    return ProcessChanges(start=[p for n, p in new.items() if n not in old],
                          stop=[p for n, p in old.items() if n not in new],
                          restart=[(old[n], p) for n, p in new.items() if n in old and old[n] != p])


def _by_node(processes: list[Process]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = defaultdict(list)
    for process in processes:
        names[process.node].append(process.name)
    return dict(names)


def _clash(old: Process, new: Process) -> bool:
    """Whether `new` cannot start while `old` runs: a device or a port of the same node."""
    ports = {old.http_port, old.kv_port} - {None}
    return old.node == new.node and bool(set(old.devices) & set(new.devices) or ports & {new.http_port, new.kv_port})


def _stop(bundle: Path, replaced: Path, node: str, names: list[str]) -> str:
    """The stop script of `node` in the restored bundle, or the replaced bundle's (kept as a revision) with the
    bundle's pid files when the restored one runs nothing there."""
    words = " ".join(quote(n) for n in names)
    if (bundle / f"stop-{node}.sh").is_file():
        return f"on {node}: bash {quote(str(bundle / f'stop-{node}.sh'))} {words}"
    return f"on {node}: RUN_DIR={quote(str(bundle / 'run'))} bash {quote(str(replaced / f'stop-{node}.sh'))} {words}"


def bash_steps(bundle: Path, replaced: Path, before: LaunchPlan, after: LaunchPlan) -> list[str]:
    """The numbered steps for a bash bundle; `replaced`: the revision that keeps the bundle rolled back from."""
    changes = process_changes(before, after)
    starting = changes.start + [new for _, new in changes.restart]
    in_the_way = changes.in_the_way()
    steps: list[list[str]] = []
    if changes.restart or in_the_way:
        steps.append(["stop what runs another way now, or holds devices or ports it needs:"] + [
            "   " + _stop(bundle, replaced, node, names)
            for node, names in _by_node([old for old, _ in changes.restart] + in_the_way).items()])
    if starting:
        steps.append(["start what it runs:"] + [
            f"   on {node}: bash {quote(str(bundle / f'launch-{node}.sh'))} " + " ".join(quote(n) for n in names)
            for node, names in _by_node(starting).items()])
    proxy = ["restart the proxy, which reads deployment.yaml (its backends and flow) when it starts:"]
    proxy += ["   " + _stop(bundle, replaced, r.node, [r.name]) for r in before.proxies]
    proxy += [f"   on {r.node}: bash {quote(str(bundle / r.script))}" for r in after.proxies]
    steps.append(proxy)
    leaving = [old for old in changes.stop if old not in in_the_way]
    if leaving:
        steps.append(["stop what it no longer runs:"] + [
            "   " + _stop(bundle, replaced, node, names) for node, names in _by_node(leaving).items()])
    return [f"{n}. {line}" if i == 0 else line for n, step in enumerate(steps, 1) for i, line in enumerate(step)]


def k8s_steps(bundle: Path, replaced: Path, before: LaunchPlan, after: LaunchPlan) -> list[str]:
    """The kubectl commands for a k8s bundle. A changed instance is deleted first, so that its pods start again from
    the new ConfigMap even where its own objects stay the same, and so is a leaving one in the way of a new one."""
    instances = instance_changes(before.deployment, after.deployment)
    in_the_way = [p.instance for p in process_changes(before, after).in_the_way()]
    first = list(dict.fromkeys([old.name for old, _ in instances.resized] + in_the_way))
    last = [i.name for i in instances.removed if i.name not in first]

    def delete(name: str) -> str:
        return f"kubectl delete --ignore-not-found -f {quote(str(replaced / 'k8s' / f'{name}.yaml'))}"

    steps = [delete(name) for name in first]
    steps.append(f"kubectl apply -f {quote(str(bundle / 'k8s'))}/")
    steps.append(f"kubectl rollout restart deployment/{object_name(after.deployment.metadata.name, 'proxy')}")
    steps += [delete(name) for name in last]
    return [f"{n}. {step}" for n, step in enumerate(steps, 1)]


def run_steps(bundle: Path, replaced: Path, before: LoadedDeployment, after: LoadedDeployment) -> dict[str, list[str]]:
    """Target -> its steps, for each target the restored bundle has (bash launchers, k8s manifests)."""
    plans = plan_processes(before), plan_processes(after)
    files = bundle_files(bundle)  # the secrets' and the table's manifests stay whatever the restored bundle's targets
    steps = {}
    if any(path.startswith("launch-") for path in files):
        steps["bash"] = bash_steps(bundle, replaced, *plans)
    if any(path.startswith("k8s/") for path in files):
        steps["k8s"] = k8s_steps(bundle, replaced, *plans)
    return steps
