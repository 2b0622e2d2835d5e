"""Ports for planned instances, handed out per host: each host's HTTP and KV side-channel ranges start afresh, so a
SuperCluster of thousands of nodes uses as few port numbers on each host as a single node does."""

from __future__ import annotations

from typing import Iterable

from ascend_pd.errors import InputError

PORT_MAX = 65535
# DP rank i of an instance serves on http_port + i; the proxy keeps 8080. Render adds coordination ports at
# http_port + 10000 and + 11000, which stay below the Ascend transport's ephemeral range while HTTP stays below 9000.
HTTP_PORTS = (8100, 8999)
# Side-channel ports go above the ephemeral range [20000, 20000 + 1000 x devices per node) when it leaves room there
# (nodes of up to 44 devices), else between the HTTP ports and the coordination ports.
KV_PORTS_BELOW = (9000, 17999)
KV_ROOM_ABOVE = 1024


class HostPorts:
    """The next free HTTP and KV port of every host. An instance claims one HTTP range and one KV range that are
    free on every host it touches, so its ports never clash with another instance's on any of them (the rules
    APD501-503) and stay out of the Ascend transport's ephemeral range (APD504) and below 65536 (APD505)."""

    def __init__(self, ephemeral: tuple[int, int]):
        above = (ephemeral[1], PORT_MAX)
        self.kv_window = above if above[1] - above[0] + 1 >= KV_ROOM_ABOVE else KV_PORTS_BELOW
        self.next_http: dict[str, int] = {}
        self.next_kv: dict[str, int] = {}

    def claim(self, instance: str, hosts: Iterable[str], http_count: int, kv_count: int) -> tuple[int, int]:
        hosts = sorted(set(hosts))
        http = max(self.next_http.get(h, HTTP_PORTS[0]) for h in hosts)
        kv = max(self.next_kv.get(h, self.kv_window[0]) for h in hosts)
        _check_fits(instance, hosts[0], "HTTP", http, http_count, HTTP_PORTS)
        _check_fits(instance, hosts[0], "KV side-channel", kv, kv_count, self.kv_window)
        for host in hosts:
            self.next_http[host] = http + http_count
            self.next_kv[host] = kv + kv_count
        return http, kv


def _check_fits(instance: str, host: str, kind: str, start: int, count: int, window: tuple[int, int]) -> None:
    if start + count - 1 > window[1]:
        raise InputError(f"instance '{instance}' needs {kind} ports {start}..{start + count - 1} on {host}, past the "
                         f"{window[0]}..{window[1]} that {kind} ports of planned instances use on a host",
                         field="--devices", fix="plan a smaller budget (--devices), or describe hosts with fewer "
                                                "devices each in the cluster file")
