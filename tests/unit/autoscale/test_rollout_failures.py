"""Every way a rollout step can fail ends with the deployment file, the proxy and the processes agreeing on what runs.
The proxy is a small HTTP server that keeps a backend table as the real admin API does and can be told to refuse or
drop calls; each engine is an HTTP server that answers /health while the process behind its port runs and serves
the prefill KV gauge on /metrics; the node command records each launch/stop script it is given (a launch starts
only the processes its script knows, as the rendered one does), and the processes that run are replayed from it."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ascend_pd.autoscale.proxy_admin import ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import RolloutTimeouts
from ascend_pd.deploy import load_deployment, parse_deployment, dump_deployment
from ascend_pd.deploy.schema import Deployment, DevicePlacement, Instance, Parallel
from ascend_pd.planner.resize import Step
from ascend_pd.proxy.endpoints import endpoints_from_deployment
from ascend_pd.render import RenderOptions, render_bundle, write_bundle
from ascend_pd.render.processes import plan_processes
from tests.ports import free_port, free_port_range

from .bundles import ROOT

EXAMPLE = load_deployment(ROOT / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml").deployment
GAUGE = "vllm:ascend_pd_kv_held_requests"
ADD, DRAIN, REMOVE = "/admin/backends", "/admin/backends/drain", "/admin/backends/remove"


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def answer(self, status: int, body: str | bytes, kind: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(handler: type[BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@dataclass
class Rule:
    path: str | None  # of a POST; None: every call
    after: int  # calls that pass first
    times: int | None  # then this many fail (None: all)
    how: str  # "refuse" (503) or "drop" (connection closed, nothing changed)
    seen: int = 0

    def fails(self, method: str, path: str) -> bool:
        if self.path is not None and (method, path) != ("POST", self.path):
            return False
        self.seen += 1
        return self.seen > self.after and (self.times is None or self.seen <= self.after + self.times)


@dataclass
class FakeProxy:
    """The admin API's backend table: add (or put back), drain, remove, list."""

    table: dict[str, dict]
    busy: dict[str, int] = field(default_factory=dict)  # requests in flight by URL
    calls: list[tuple[str, str, str | None, object]] = field(default_factory=list)  # method, path, url, answer
    rules: list[Rule] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, path: str | None = None, after: int = 0, times: int | None = None, how: str = "refuse") -> None:
        self.rules.append(Rule(path, after, times, how))

    def start(self) -> ThreadingHTTPServer:
        proxy = self

        class Handler(_Quiet):
            def do_GET(self):
                proxy.handle(self, "GET", None)

            def do_POST(self):
                proxy.handle(self, "POST", json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

        self.server = serve(Handler, free_port())
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        return self.server

    def handle(self, request: _Quiet, method: str, body: dict | None) -> None:
        url = body and body["url"]
        with self.lock:
            failing = next((r for r in self.rules if r.fails(method, request.path)), None)
            if failing is not None:
                self.calls.append((method, request.path, url, failing.how))
                if failing.how == "drop":
                    request.close_connection = True
                    return
                return request.answer(503, '{"error": "refused"}')
            status, answer = self.apply(method, request.path, body)
            self.calls.append((method, request.path, url, status))
        request.answer(status, json.dumps(answer))

    def apply(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        if method == "GET":
            return 200, [{**b, "inflight": self.busy.get(b["url"], 0)} for b in self.table.values()]
        url = body["url"]
        if path == ADD:
            self.table[url] = {"url": url, "role": body["role"], "instance": body.get("instance"),
                               "dp_rank": body.get("dp_rank", 0), "draining": False}
            return 200, self.table[url]
        if url not in self.table:
            return 404, {"error": "no such backend"}
        if path == DRAIN:
            self.table[url]["draining"] = True
            return 200, self.table[url]
        return 200, self.table.pop(url)

    def backends(self) -> dict[str, tuple[str, bool]]:
        """url -> (role, draining): the table the proxy ends with."""
        return {url: (b["role"], b["draining"]) for url, b in self.table.items()}


class FakeNode:
    """The node command: records each script it is given and what it started; `fail` makes a script exit 1 at
    the named process (`launch NAME` / `stop NAME`), after doing the ones before it."""

    def __init__(self, tmp: Path, running: set[str]):
        self.initial = set(running)
        self.calls = tmp / "node-calls.jsonl"
        self.fails = tmp / "node-fails"
        self.script = tmp / "node"
        self.script.write_text(f"""#!{sys.executable}
import json, pathlib, sys, time
node, _bash, script, *names = sys.argv[1:]
kind = pathlib.Path(script).name.split("-")[0]
text = pathlib.Path(script).read_text()
fails = pathlib.Path({str(self.fails)!r})
refused = fails.read_text().splitlines() if fails.exists() else []
done, ok = [], True
for name in names:
    if f"{{kind}} {{name}}" in refused:
        ok = False
        break
    if kind == "stop" or f"start {{name}} " in text:  # a launcher starts only the processes it knows
        done.append(name)
with open({str(self.calls)!r}, "a") as calls:
    calls.write(json.dumps({{"kind": kind, "names": names, "done": done, "ok": ok, "time": time.time()}}) + "\\n")
sys.exit(0 if ok else 1)
""")
        self.script.chmod(0o755)

    def fail(self, kind: str, name: str) -> None:
        with self.fails.open("a") as fails:
            fails.write(f"{kind} {name}\n")

    def log(self) -> list[dict]:
        return [json.loads(line) for line in self.calls.read_text().splitlines()] if self.calls.exists() else []

    def running(self) -> set[str]:
        """The processes that run after every script so far."""
        now = set(self.initial)
        for call in self.log():
            now = now | set(call["done"]) if call["kind"] == "launch" else now - set(call["done"])
        return now


class FakeEngines:
    """One HTTP server per engine port: /health answers 200 while a process of that port runs (and is not broken);
    /metrics carries the KV gauge when `held` has a count for the port, /version a vLLM that keeps it current."""

    def __init__(self, node: FakeNode, ports: dict[str, int]):
        self.node = node
        self.ports = ports  # process name -> HTTP port, of every deployment the test uses
        self.broken: set[str] = set()  # processes that run but never answer /health
        self.held: dict[int, int] = {}
        self.metrics_read: list[int] = []
        self.servers = [serve(self._handler(port), port) for port in sorted(set(ports.values()))]

    def up(self, port: int) -> bool:
        return any(self.ports[name] == port and name not in self.broken for name in self.node.running())

    def _handler(self, port: int) -> type[BaseHTTPRequestHandler]:
        engines = self

        class Handler(_Quiet):
            def do_GET(self):
                if self.path == "/health":
                    return self.answer(200 if engines.up(port) else 503, "")
                if self.path == "/version":  # a vLLM that keeps the gauge current (engine_kv.TRUSTED_FROM)
                    return self.answer(200, '{"version": "0.32.0"}')
                engines.metrics_read.append(port)
                held = engines.held.get(port)
                lines = [] if held is None else [f"# TYPE {GAUGE} gauge", f'{GAUGE}{{engine="0"}} {held}.0']
                self.answer(200, "\n".join(["# TYPE vllm:num_requests_running gauge",
                                            "vllm:num_requests_running 0.0", *lines]) + "\n", "text/plain")

        return Handler


def instance(name: str, role: str, devices: list[int]) -> Instance:
    """One of the example's instances, renamed and placed: one DP rank per device, ports nothing else holds."""
    dp = len(devices)
    return EXAMPLE.instances[0].model_copy(update={
        "name": name, "engine_id": name, "role": role, "parallel": Parallel(tp=1, dp=dp, ep=1, pp=1),
        "devices": [DevicePlacement(node="localhost-00", devices=[d]) for d in devices],
        "http_port": free_port_range(dp), "kv_port": free_port_range(dp)})


def flipped(old: Instance, name: str, role: str) -> Instance:
    return old.model_copy(update={"name": name, "engine_id": name, "role": role})


def deployment(*instances: Instance) -> Deployment:
    return EXAMPLE.model_copy(update={"instances": list(instances)})


def _plan(d: Deployment):
    return plan_processes(parse_deployment(dump_deployment(d), "deployment.yaml"))


@dataclass
class Rig:
    file: Path
    proxy: FakeProxy
    node: FakeNode
    engines: FakeEngines
    log: RolloutLog

    def run(self, current: Deployment, target: Deployment, steps: list[Step], **timeouts) -> Deployment:
        launcher = Launcher(self.file.parent, "bash", node_command=f"{self.node.script} {{node}}", timeout=20)
        rollout = Rollout(self.file, ProxyAdmin(self.proxy.url, "token", timeout=2), launcher, self.log,
                          RolloutTimeouts(**{"start": 5.0, "drain": 5.0, "command": 20.0, **timeouts}))
        return rollout.run(current, target, steps)

    def phases(self) -> list[tuple[str, str]]:
        return [(line["phase"], line["status"]) for line in self.log.lines[1:] if "step" in line]

    def agree(self) -> list[str]:
        """The instances the deployment file names, after checking that the proxy serves exactly their endpoints
        (none left drained) and exactly their processes run."""
        loaded = load_deployment(self.file)
        assert self.proxy.backends() == {e.url: (e.role, False) for e in endpoints_from_deployment(loaded)}
        assert self.node.running() == {p.name for p in plan_processes(loaded).processes()}
        return [i.name for i in loaded.deployment.instances]


@pytest.fixture
def rig(tmp_path):
    made = []

    def start(current: Deployment, target: Deployment) -> Rig:
        loaded = parse_deployment(dump_deployment(current), "deployment.yaml")
        write_bundle(render_bundle(loaded, RenderOptions(target="bash")).files, tmp_path / "bundle")
        proxy = FakeProxy({e.url: {"url": e.url, "role": e.role, "instance": e.instance, "dp_rank": e.dp_rank,
                                   "draining": False} for e in endpoints_from_deployment(loaded)})
        made.append(proxy.start())
        node = FakeNode(tmp_path, {p.name for p in _plan(current).processes()})
        ports = {p.name: p.http_port for d in (current, target) for p in _plan(d).processes()}
        engines = FakeEngines(node, ports)
        made.extend(engines.servers)
        return Rig(tmp_path / "bundle" / "deployment.yaml", proxy, node, engines, RolloutLog(io.StringIO()))

    yield start
    for server in made:
        server.shutdown()
        server.server_close()


def urls_of(one: Instance) -> list[str]:
    return [f"http://127.0.0.1:{one.http_port + rank}" for rank in range(one.parallel.dp)]


# --- an instance that leaves: whatever phase fails, it is back in the proxy and runs, as the file says


def stop_a_two_rank_decode() -> tuple[Deployment, Deployment, list[Step], Instance]:
    prefill = instance("prefill-0", "prefill", [0])
    leaving = instance("decode-0", "decode", [1, 2])
    staying = instance("decode-1", "decode", [3])
    return (deployment(prefill, leaving, staying), deployment(prefill, staying),
            [Step("stop", "decode-0", "decode")], leaving)


def _drain_fails_half_way(rig: Rig, _leaving: Instance) -> None:
    rig.proxy.fail(DRAIN, after=1)  # the first endpoint is drained, the second call fails


def _busy_past_the_drain_timeout(rig: Rig, leaving: Instance) -> None:
    rig.proxy.busy[urls_of(leaving)[1]] = 1


def _leave_fails_half_way(rig: Rig, _leaving: Instance) -> None:
    rig.proxy.fail(REMOVE, after=1)


def _stop_script_fails(rig: Rig, _leaving: Instance) -> None:
    rig.node.fail("stop", "decode-0-dp0")


@pytest.mark.parametrize("breaks, failed", [(_drain_fails_half_way, "drain"), (_busy_past_the_drain_timeout, "idle"),
                                            (_leave_fails_half_way, "leave"), (_stop_script_fails, "stop")],
                         ids=["drain half-way", "idle", "leave half-way", "stop"])
def test_a_leaving_instance_whose_phase_fails_serves_again_in_full(rig, breaks, failed):
    current, target, steps, leaving = stop_a_two_rank_decode()
    made = rig(current, target)
    breaks(made, leaving)
    after = made.run(current, target, steps, drain=1.0)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0", "decode-1"]
    phases = made.phases()
    assert phases[phases.index((failed, "failed")) + 1:] == [("join", "ok")]
    assert made.log.lines[-1]["phase"] == "rollout" and made.log.lines[-1]["status"] == "failed"


def test_a_leaving_instance_the_proxy_will_not_take_back_is_stopped_and_the_file_says_so(rig):
    current, target, steps, leaving = stop_a_two_rank_decode()
    made = rig(current, target)
    made.proxy.fail(DRAIN, after=1)  # half drained ...
    made.proxy.fail(ADD)  # ... and the put-back refused: it would hold its devices serving nothing
    after = made.run(current, target, steps)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-1"]
    assert made.phases() == [("drain", "failed"), ("join", "failed"), ("unjoin", "ok"), ("stop-unjoined", "ok")]
    removed = [url for method, path, url, status in made.proxy.calls if path == REMOVE and status == 200]
    assert removed == urls_of(leaving)


# --- a new instance: whatever phase fails, it is stopped, out of the proxy, and not in the file


def start_a_two_rank_decode() -> tuple[Deployment, Deployment, list[Step], Instance]:
    prefill, decode = instance("prefill-0", "prefill", [0]), instance("decode-0", "decode", [1])
    new = instance("decode-1", "decode", [2, 3])
    return deployment(prefill, decode), deployment(prefill, decode, new), [Step("start", "decode-1", "decode")], new


def _launch_fails_half_way(rig: Rig) -> None:
    rig.node.fail("launch", "decode-1-dp1")  # dp0 started, then the script failed


def _never_healthy(rig: Rig) -> None:
    rig.engines.broken.add("decode-1-dp1")


def _join_refused_half_way(rig: Rig) -> None:
    rig.proxy.fail(ADD, after=1)  # dp0 joined, dp1 refused


def _proxy_unreachable_at_join(rig: Rig) -> None:
    rig.proxy.fail(how="drop")  # every call from now on: the table keeps what it had


@pytest.mark.parametrize("breaks, phases", [
    (_launch_fails_half_way, [("launch", "failed"), ("stop-unhealthy", "ok")]),
    (_never_healthy, [("launch", "ok"), ("healthy", "failed"), ("stop-unhealthy", "ok")]),
    (_join_refused_half_way, [("launch", "ok"), ("healthy", "ok"), ("join", "failed"), ("unjoin", "ok"),
                              ("stop-unjoined", "ok")]),
    (_proxy_unreachable_at_join, [("launch", "ok"), ("healthy", "ok"), ("join", "failed"), ("unjoin", "failed"),
                                  ("stop-unjoined", "ok")]),
], ids=["launch half-way", "never healthy", "join refused half-way", "proxy unreachable at join"])
def test_a_new_instance_whose_phase_fails_is_stopped_and_out_of_the_proxy(rig, breaks, phases):
    current, target, steps, new = start_a_two_rank_decode()
    made = rig(current, target)
    breaks(made)
    after = made.run(current, target, steps, start=1.0)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0"]
    assert made.phases() == phases
    assert [c["kind"] for c in made.node.log()] == ["launch", "stop"]


def test_a_join_refused_half_way_removes_the_endpoint_that_did_join(rig):
    current, target, steps, new = start_a_two_rank_decode()
    made = rig(current, target)
    _join_refused_half_way(made)
    made.run(current, target, steps)
    first, second = urls_of(new)
    assert [(path, url, status) for method, path, url, status in made.proxy.calls if method == "POST"] == [
        (ADD, first, 200), (ADD, second, "refuse"), (REMOVE, first, 200)]
    made.agree()


# --- a flip: the new instance failing on the old one's devices brings the old one back


def flip_a_decode_to_prefill() -> tuple[Deployment, Deployment, list[Step], Instance]:
    prefill, decode = instance("prefill-0", "prefill", [0]), instance("decode-0", "decode", [1])
    old = instance("decode-1", "decode", [2])
    return (deployment(prefill, decode, old), deployment(prefill, decode, flipped(old, "prefill-1", "prefill")),
            [Step("flip", "prefill-1", "prefill", replaces="decode-1")], old)


RETIRED = [("drain", "ok"), ("idle", "ok"), ("leave", "ok"), ("stop", "ok")]
RESTORED = [("restore-render", "ok"), ("restore-launch", "ok"), ("restore-healthy", "ok"), ("restore-join", "ok"),
            ("restore", "ok")]


def _new_one_never_healthy(rig: Rig) -> None:
    rig.engines.broken.add("prefill-1-dp0")


def _new_one_refused_by_the_proxy(rig: Rig) -> None:
    rig.proxy.fail(ADD, times=1)


@pytest.mark.parametrize("breaks, failing", [
    (_new_one_never_healthy, [("launch", "ok"), ("healthy", "failed"), ("stop-unhealthy", "ok")]),
    (_new_one_refused_by_the_proxy, [("launch", "ok"), ("healthy", "ok"), ("join", "failed"), ("unjoin", "ok"),
                                     ("stop-unjoined", "ok")]),
], ids=["never healthy", "join refused"])
def test_a_flip_that_fails_brings_the_old_instance_back_on_its_devices(rig, breaks, failing):
    current, target, steps, old = flip_a_decode_to_prefill()
    made = rig(current, target)
    breaks(made)
    after = made.run(current, target, steps, start=1.0)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0", "decode-1"]
    assert made.proxy.backends()[urls_of(old)[0]] == ("decode", False)
    assert made.phases() == RETIRED + failing + RESTORED
    # the old instance started again from launchers that know it: the target's do not
    last = made.node.log()[-1]
    assert (last["kind"], last["done"], last["ok"]) == ("launch", ["decode-1-dp0"], True)


def test_a_flip_whose_restore_fails_too_leaves_neither_and_the_file_says_so(rig):
    current, target, steps, old = flip_a_decode_to_prefill()
    made = rig(current, target)
    made.engines.broken.add("prefill-1-dp0")
    made.node.fail("launch", "decode-1-dp0")
    after = made.run(current, target, steps, start=1.0)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0"]
    restore = [p for p in made.phases() if p[0].startswith("restore")]
    assert restore == [("restore-render", "ok"), ("restore-launch", "failed"), ("restore-stop-unhealthy", "ok"),
                       ("restore", "failed")]


# --- a prefill instance that leaves waits until decode has read its KV


def stop_a_prefill() -> tuple[Deployment, Deployment, list[Step], Instance]:
    staying, leaving = instance("prefill-0", "prefill", [0]), instance("prefill-1", "prefill", [1])
    decode = instance("decode-0", "decode", [2])
    return (deployment(staying, leaving, decode), deployment(staying, decode),
            [Step("stop", "prefill-1", "prefill")], leaving)


def test_a_prefill_instance_stops_only_once_its_engine_holds_no_kv(rig):
    current, target, steps, leaving = stop_a_prefill()
    made = rig(current, target)
    made.engines.held[leaving.http_port] = 2
    released = []

    def release() -> None:
        released.append(time.time())
        made.engines.held[leaving.http_port] = 0

    timer = threading.Timer(1.0, release)
    timer.start()
    after = made.run(current, target, steps)
    timer.join()
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0"]
    assert made.phases() == [("drain", "ok"), ("idle", "ok"), ("kv-released", "ok"), ("leave", "ok"),
                             ("stop", "ok"), ("done", "ok")]
    (stop,) = made.node.log()
    assert stop["kind"] == "stop" and stop["time"] >= released[0]


def test_a_prefill_instance_that_keeps_holding_kv_serves_again(rig):
    current, target, steps, leaving = stop_a_prefill()
    made = rig(current, target)
    made.engines.held[leaving.http_port] = 1
    after = made.run(current, target, steps, drain=1.0)
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "prefill-1", "decode-0"]
    assert made.phases() == [("drain", "ok"), ("idle", "ok"), ("kv-released", "failed"), ("join", "ok")]
    assert made.node.log() == []


def test_a_decode_instance_does_not_wait_for_kv(rig):
    prefill, decode = instance("prefill-0", "prefill", [0]), instance("decode-0", "decode", [1])
    leaving = instance("decode-1", "decode", [2])
    current, target = deployment(prefill, decode, leaving), deployment(prefill, decode)
    made = rig(current, target)
    after = made.run(current, target, [Step("stop", "decode-1", "decode")])
    assert [i.name for i in after.instances] == made.agree() == ["prefill-0", "decode-0"]
    assert made.phases() == RETIRED + [("done", "ok")]
    assert made.engines.metrics_read == []


# --- what the file says runs, runs: the reconcile of each interval launches an instance that does not answer


def test_an_instance_that_does_not_answer_is_launched_again_and_one_that_answers_is_left_alone(rig):
    prefill = instance("prefill-0", "prefill", [0])
    decode = instance("decode-0", "decode", [1, 2])
    running = deployment(prefill, decode)
    made = rig(running, running)
    made.file.write_text(dump_deployment(running))
    lost = "decode-0-dp1"  # one DP rank of decode-0 died: its port does not answer
    made.node.initial.discard(lost)
    launcher = Launcher(made.file.parent, "bash", node_command=f"{made.node.script} {{node}}", timeout=20)
    rollout = Rollout(made.file, ProxyAdmin(made.proxy.url, "token", timeout=2), launcher, made.log)
    said = rollout.relaunch_missing(running)
    assert len(said) == 1 and said[0].startswith("decode-0:"), said
    (call,) = made.node.log()
    assert call["kind"] == "launch" and set(call["names"]) == {"decode-0-dp0", "decode-0-dp1"}
    assert lost in made.node.running()
    assert rollout.relaunch_missing(running) == []  # every endpoint answers now: nothing is launched
    assert len(made.node.log()) == 1
