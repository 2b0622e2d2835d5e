"""A rehearsal across hosts (issue 41): P, D and the proxy each on a host of its own, three network namespaces on one
bridge, in a subnet the cluster file knows nothing of. The user's path: the deployment is rendered with
`--node-ip NODE=IP` for every node, each node runs its own launch script, and the proxy started by launch-proxy.sh
must reach the engines, and in push mode tell D where P is, at those addresses, not at the cluster file's
`host_ip_start` numbering. Answers through the proxy equal D's own answers (each prompt computed there alone, as a
colocated engine does) token for token, and D's prompt KV came from P over the veth links."""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.ports import free_port_range

from .conftest import BASE, case_logs
from .netns import BridgedHosts
from .stack import (Stack, assert_prompt_kv_came_from_prefill, http_json, http_text, metric, prompt_counts,
                    render_as_an_operator)
from . import test_pd_on_cpu as pd_on_cpu
from .workload import LONG, SHARED_PREFIX, completion_body

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NODES = ["host-00", "host-01", "host-02"]  # P, D, the proxy
# The cluster file numbers its nodes from an address no host here holds: an address taken from it is unreachable.
FILE_HOST_IP_START = "198.51.100.1"
SUBNET = "10.214.41"  # the hosts' own addresses: SUBNET.10, .11, .12; the bridge (this test) SUBNET.1
GQA = pd_on_cpu.GQA
PROMPTS = {"long": LONG, "shared-0": SHARED_PREFIX[0], "shared-1": SHARED_PREFIX[1]}  # keys of the reference
ENGINES_READY_S = 600.0
PROXY_READY_S = 60.0  # after the engines answer: a few health-check rounds
KV_FAILURES = "vllm:ascend_pd_kv_failures_total"

CLUSTER = {
    "apiVersion": "ascend-pd/v1", "kind": "Cluster", "name": "across-hosts",
    "description": "Three CPU hosts on one TCP network, numbered from an address none of them has at this site.",
    "node_types": {"cpu-host": {"chip": "cpu", "devices": 2, "resource_name": "cpu"}},
    "links": {"shm": {"description": "shared memory between ranks of one host", "bandwidth_gbytes_per_s": 5,
                      "latency_us": 5, "tp_capable": True},
              "tcp": {"description": "TCP between hosts", "bandwidth_gbytes_per_s": 1, "latency_us": 50,
                      "tp_capable": False}},
    "topology": {"node": "shm", "cluster": "tcp"},
    "node_groups": [{"type": "cpu-host", "count": len(NODES), "name_prefix": "host-",
                     "host_ip_start": FILE_HOST_IP_START, "interface": "eth0"}],
    "protocols": ["tcp"],
}


def say(config, line: str) -> None:
    """A line on the terminal now, past pytest's capture (durations of the run)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


def deployment(models: Path, cluster_file: Path, mode: str) -> dict:
    """The shipped local-cpu example on three hosts: P on the first (device 0), D on the second (device 1, so that
    render binds them to different cores), the proxy on the third; eager engines, ports from tests/ports.py."""
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = f"across-hosts-{mode}"
    data["cluster"] = str(cluster_file)
    data["model"].update(name=GQA, path=str(models / GQA), served_name=GQA)
    data["connector"] = {"implementation": "ascend-pd", "mode": mode, "protocol": "tcp"}
    prefill, decode = data["instances"]
    for inst, node, device in ((prefill, NODES[0], 0), (decode, NODES[1], 1)):
        inst["devices"] = [{"node": node, "devices": [device]}]
        inst["http_port"] = free_port_range(1)
        inst["kv_port"] = free_port_range(1)
        inst["vllm"]["enforce_eager"] = True
    data["proxy"] = {"node": NODES[2], "port": free_port_range(1), "policy": "least-loaded", "workers": 1}
    return data


class HostsStack(Stack):
    """A deployment rendered for the hosts' own addresses and started node by node, each launch script in its
    host's namespace, as an operator runs them; stopped by the rendered stop scripts."""

    def __init__(self, deployment: dict, workdir: Path, logs: Path, hosts: BridgedHosts):
        super().__init__(deployment, workdir, logs)
        self.hosts = hosts
        self.address = dict(zip(NODES, hosts.addresses))
        self.namespace = dict(zip(NODES, hosts.names))

    @property
    def proxy_url(self) -> str:
        return f"http://{self.address[self.deployment['proxy']['node']]}:{self.deployment['proxy']['port']}"

    def endpoint_urls(self, role: str) -> list[str]:
        return [f"http://{self.address[inst['devices'][0]['node']]}:{inst['http_port']}"
                for inst in self.deployment["instances"] if inst["role"] == role]

    def start(self) -> "HostsStack":
        node_ips = [arg for node, ip in self.address.items() for arg in ("--node-ip", f"{node}={ip}")]
        env = render_as_an_operator(self.deployment, self.workdir, self.logs, self.render_dir, *node_ips)
        scripts = [(self.namespace[node], self.render_dir / f"launch-{node}.sh") for node in NODES]
        scripts.append((self.namespace[self.deployment["proxy"]["node"]], self.render_dir / "launch-proxy.sh"))
        for namespace, script in scripts:
            if script.exists():  # the proxy's node runs no engine
                subprocess.run(self.hosts.command(namespace, "bash", str(script)), check=True, env=env,
                               capture_output=True, text=True)
        deadline = time.monotonic() + ENGINES_READY_S
        for url in self.endpoint_urls("prefill") + self.endpoint_urls("decode"):
            self._wait_ready(f"{url}/v1/models", deadline)
        return self

    def wait_proxy_ready(self) -> None:
        """The proxy's /health says ok once it reached a P and a D; if it never does, say which backends it tried.
        Waited for by the test, not the fixture: a proxy that cannot reach the engines is what this test is about."""
        url, body = f"{self.proxy_url}/health", "(no answer)"
        deadline = time.monotonic() + PROXY_READY_S
        while time.monotonic() < deadline:
            try:
                http_text(url, timeout=2, token=self.admin_token)  # the token: which backends, if it fails
                return
            except urllib.error.HTTPError as unavailable:
                body = unavailable.read().decode(errors="replace")
            except (urllib.error.URLError, OSError) as refused:
                body = f"(no answer: {refused})"
            self.fail_if_a_process_died()
            time.sleep(0.5)
        raise AssertionError(f"the proxy at {url} did not reach the engines at {self.endpoint_urls('prefill')} and "
                             f"{self.endpoint_urls('decode')} within {PROXY_READY_S:.0f} s; it answers:\n{body}\n"
                             f"logs in {self.logs}")


@pytest.fixture(scope="module")
def hosts():
    with BridgedHosts("apdx", SUBNET, len(NODES)) as made:
        yield made


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("across-hosts") / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER, sort_keys=False))
    return path


@pytest.fixture(scope="module", params=["pull", "push"])
def stack(request, hosts, cluster_file, tiny_models):
    mode = request.param
    logs = case_logs(f"across-hosts-{mode}")
    started = time.monotonic()
    with HostsStack(deployment(tiny_models, cluster_file, mode), logs / "run", logs, hosts) as running:
        running.mode = mode
        say(request.config, f"across-hosts {mode}: stack rendered, launched on 3 hosts, engines ready in "
                            f"{time.monotonic() - started:.1f} s")
        yield running


def kv_bytes_per_token(model_dir: Path) -> int:
    """K and V of every layer for one token, in float32 as the engines run."""
    config = json.loads((model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * 4


def test_answers_through_the_proxy_on_its_host_equal_the_colocated_run_and_the_kv_crossed_the_link(
        stack, hosts, tiny_models, request):
    started = time.monotonic()
    stack.wait_proxy_ready()
    say(request.config, f"across-hosts {stack.mode}: proxy ready {time.monotonic() - started:.1f} s after the engines")
    (decode_url,) = stack.endpoint_urls("decode")
    # the colocated answers: D computing each prompt alone (test_pd_on_cpu.colocated_answers)
    reference = {key: http_json(f"{decode_url}/v1/completions", dict(completion_body(GQA, prompt),
                                                                     cache_salt=pd_on_cpu.ALONE),
                                timeout=120)["choices"][0]["token_ids"] for key, prompt in PROMPTS.items()}
    alone_counts = prompt_counts(decode_url)  # D's counts from here on are the requests through the proxy
    _, hits_before, _ = alone_counts
    p_host, d_host = stack.namespace[NODES[0]], stack.address[NODES[1]]
    hosts.count_tcp_bytes(p_host, to=d_host)

    answers, seconds = {}, {}
    for key, prompt in PROMPTS.items():
        started = time.monotonic()
        reply = http_json(f"{stack.proxy_url}/v1/completions", completion_body(GQA, prompt), timeout=120)
        seconds[key] = time.monotonic() - started
        answers[key] = reply["choices"][0]["token_ids"]
    say(request.config, f"across-hosts {stack.mode}: requests through {stack.proxy_url}: "
                        + ", ".join(f"{key} {s:.2f} s" for key, s in seconds.items()))

    mismatched = {k: (answers[k], reference[k]) for k in PROMPTS if answers[k] != reference[k]}
    assert mismatched == {}

    # D loaded the prompts' KV from outside instead of computing it, and nothing failed on the way ...
    assert_prompt_kv_came_from_prefill(decode_url, since=alone_counts)
    assert metric(http_text(f"{decode_url}/metrics"), KV_FAILURES) == 0
    # ... and the bytes came from P's host to D's, over the veth links (the only path between them).
    hits = metric(http_text(f"{decode_url}/metrics"), "vllm:external_prefix_cache_hits_total") - hits_before
    sent = hosts.tcp_bytes_sent(p_host, to=d_host)
    say(request.config, f"across-hosts {stack.mode}: D loaded {hits:.0f} prompt tokens from P; P's host sent "
                        f"{sent} TCP bytes to D's ({kv_bytes_per_token(tiny_models / GQA)} KV bytes a token)")
    assert hits > 0
    assert sent >= hits * kv_bytes_per_token(tiny_models / GQA), (sent, hits)
