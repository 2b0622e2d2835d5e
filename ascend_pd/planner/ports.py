"""Ports for planned instances, handed out per host: each host's HTTP and KV side-channel ranges start afresh, so a
SuperCluster of thousands of nodes uses as few port numbers on each host as a single node does."""

from __future__ import annotations

from typing import Iterable

from ascend_pd.errors import InputError

HTTP_PORT_START = 8100  # DP rank i of an instance serves on http_port + i; the proxy keeps 8080
PORT_MAX = 65535


class HostPorts:
    """The next free HTTP and KV port of every host. An instance claims one HTTP range and one KV range that are
    free on every host it touches, so its ports never clash with another instance's on any of them (the rules
    APD501-503), KV ports stay above the Ascend transport's ephemeral range (APD504) and HTTP ports below it."""

    def __init__(self, ephemeral: tuple[int, int]):
        self.http_limit = ephemeral[0] - 1
        self.kv_start = ephemeral[1]
        self.next_http: dict[str, int] = {}
        self.next_kv: dict[str, int] = {}

    def claim(self, instance: str, hosts: Iterable[str], http_count: int, kv_count: int) -> tuple[int, int]:
        hosts = sorted(set(hosts))
        http = max(self.next_http.get(h, HTTP_PORT_START) for h in hosts)
        kv = max(self.next_kv.get(h, self.kv_start) for h in hosts)
        if http + http_count - 1 > self.http_limit:
            raise InputError(f"instance '{instance}' needs HTTP ports {http}..{http + http_count - 1} on {hosts[0]}, "
                             f"into the Ascend transport's ephemeral range from {self.http_limit + 1}",
                             field="--devices", fix="plan fewer, larger instances per host (a smaller budget or "
                                                     "a cluster file with fewer devices per node)")
        if kv + kv_count - 1 > PORT_MAX:
            raise InputError(f"instance '{instance}' needs KV side-channel ports {kv}..{kv + kv_count - 1} on "
                             f"{hosts[0]}, past {PORT_MAX}", field="--devices",
                             fix="plan fewer instances per host (a smaller budget), or fewer devices per instance")
        for host in hosts:
            self.next_http[host] = http + http_count
            self.next_kv[host] = kv + kv_count
        return http, kv
