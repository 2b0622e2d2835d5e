"""A site whose hosts are not numbered as the cluster file guesses (issue 41): P, D and the proxy each on a host of
its own, three network namespaces on one bridge, in a subnet the cluster file knows nothing of. The deployment is
rendered with `--node-ip NODE=IP` for every node, each node runs its own launch script in its namespace, and the
proxy started by launch-proxy.sh must reach the engines, and in push mode tell D where P is, at those addresses,
not at the cluster file's `host_ip_start` numbering. The site's environment names an HTTP proxy, as Ascend hosts
often do for their package mirrors; nothing of the deployment may send its own traffic there."""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.error
from pathlib import Path

from .netns import BridgedHosts
from .stack import START_TIMEOUT_S, Stack, http_text, render_as_an_operator

NODES = ["host-00", "host-01", "host-02"]  # P, D, the proxy
# The cluster file numbers its nodes from an address no host here holds: an address taken from it is unreachable.
FILE_HOST_IP_START = "198.51.100.1"
SUBNET = "10.214.41"  # the hosts' own addresses: SUBNET.10, .11, .12; the bridge (this host) SUBNET.1
PROXY_READY_S = 60.0  # after the engines answer: a few health-check rounds
# The site's HTTP proxy, in every variable the stack's clients read: an address nothing answers (TEST-NET-1), so a
# call sent there fails instead of passing.
SITE_PROXY = "http://192.0.2.1:3128"
SITE_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def site_environment(env: dict) -> dict:
    """`env` as a site with an HTTP proxy for everything has it: no `no_proxy` either."""
    site = {name: value for name, value in env.items() if name.lower() != "no_proxy"}
    return site | {name: SITE_PROXY for name in SITE_PROXY_VARIABLES}

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


def bridged_hosts() -> BridgedHosts:
    return BridgedHosts("apdx", SUBNET, len(NODES))


def on_hosts(deployment: dict, cluster_file: Path) -> dict:
    """A 1 P + 1 D deployment of the local-cpu cluster moved to the three hosts: P on the first (device 0), D on
    the second (device 1, so that render binds them to different cores), the proxy on the third."""
    data = copy.deepcopy(deployment)
    data["cluster"] = str(cluster_file)
    prefill, decode = data["instances"]
    prefill["devices"] = [{"node": NODES[0], "devices": [0]}]
    decode["devices"] = [{"node": NODES[1], "devices": [1]}]
    data["proxy"]["node"] = NODES[2]
    return data


def kv_bytes_per_token(model_dir: Path) -> int:
    """K and V of every layer for one token, in float32 as the engines run."""
    config = json.loads((model_dir / "config.json").read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    return config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * head_dim * 4


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
        env = site_environment(render_as_an_operator(self.deployment, self.workdir, self.logs, self.render_dir,
                                                     *node_ips))
        scripts = [(self.namespace[node], self.render_dir / f"launch-{node}.sh") for node in NODES]
        scripts.append((self.namespace[self.deployment["proxy"]["node"]], self.render_dir / "launch-proxy.sh"))
        for namespace, script in scripts:
            if script.exists():  # the proxy's node runs no engine
                subprocess.run(self.hosts.command(namespace, "bash", str(script)), check=True, env=env,
                               capture_output=True, text=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        for url in self.endpoint_urls("prefill") + self.endpoint_urls("decode"):
            self._wait_ready(f"{url}/v1/models", deadline)
        self._wait_proxy_ready()
        return self

    def _wait_proxy_ready(self) -> None:
        """The proxy's /health says ok once it reached a P and a D; if it never does, say which backends it tried
        (a proxy that reaches the engines at the cluster file's addresses reaches none here)."""
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

    def count_kv_bytes(self) -> None:
        """Count the TCP bytes P's host sends D's from now on: the KV, whichever side starts the transfer."""
        self.hosts.count_tcp_bytes(self.namespace[NODES[0]], to=self.address[NODES[1]])

    def kv_bytes_sent(self) -> int:
        return self.hosts.tcp_bytes_sent(self.namespace[NODES[0]], to=self.address[NODES[1]])
