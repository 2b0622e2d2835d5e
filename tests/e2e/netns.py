"""A prefill host of its own: a network namespace joined to this host by a veth pair, whose traffic iptables can
drop, as a firewall or a dead link does on a real cluster."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.ci import in_ci


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def require_namespaces(cases: str = "the unreachable-peer cases") -> None:
    """Namespaces need root, iproute2 and iptables (make test installs them); CI must have them, a developer's
    box without them skips these cases and says why."""
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    reason = (f"needs {', '.join(missing)} (apt-get install iproute2 iptables)" if missing else
              "needs root for network namespaces" if os.geteuid() != 0 else None)
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"{cases} {reason}")
    pytest.skip(reason)


class Namespace:
    """`name` holds address `inner`; this host reaches it at `inner` and is reached from it at `outer`."""

    def __init__(self, name: str, subnet: int):
        self.name = name
        self.outer, self.inner = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
        self._veth = f"apd{subnet}"

    def __enter__(self) -> "Namespace":
        require_namespaces()
        self.close()  # left over from a run that was killed
        _run("ip", "netns", "add", self.name)
        _run("ip", "link", "add", self._veth, "type", "veth", "peer", "name", f"{self._veth}ns")
        _run("ip", "link", "set", f"{self._veth}ns", "netns", self.name)
        _run("ip", "addr", "add", f"{self.outer}/24", "dev", self._veth)
        _run("ip", "link", "set", self._veth, "up")
        self.run("ip", "addr", "add", f"{self.inner}/24", "dev", f"{self._veth}ns")
        self.run("ip", "link", "set", f"{self._veth}ns", "up")
        self.run("ip", "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self._veth], capture_output=True)

    def run(self, *cmd: str) -> None:
        _run("ip", "netns", "exec", self.name, *cmd)

    def command(self, *cmd: str) -> list[str]:
        """`cmd` as run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *cmd]

    def drop(self, chain: str, ports: str | None = None) -> None:
        """Silently drop TCP packets coming in (chain INPUT) or going out (OUTPUT) of the namespace, to `ports`
        ("N" or "N:M") or all of them, as a firewall does."""
        match = ["--dport", ports] if ports else []
        self.run("iptables", "-A", chain, "-p", "tcp", *match, "-j", "DROP")

    def open_all(self) -> None:
        self.run("iptables", "-F", "INPUT")
        self.run("iptables", "-F", "OUTPUT")


class BridgedHosts:
    """`count` hosts of one subnet, as on a cluster's network: each a namespace whose `eth0` (one end of a veth pair)
    holds `addresses[i]`, the other ends joined by a Linux bridge that holds `gateway`, so this host (the root
    namespace) reaches every host and the hosts reach each other only over their veth links. No default route: an
    address outside the subnet is unreachable at once (ENETUNREACH), not after a timeout."""

    def __init__(self, prefix: str, subnet: str, count: int):
        self.prefix = prefix  # at most 8 characters: interface names stay under Linux's 15
        self.bridge = f"{prefix}br"
        self.gateway = f"{subnet}.1"
        self.names = [f"{prefix}-{i}" for i in range(count)]
        self.addresses = [f"{subnet}.{10 + i}" for i in range(count)]
        self.veths = [f"{prefix}{i}" for i in range(count)]
        self._forward_rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]

    def __enter__(self) -> "BridgedHosts":
        require_namespaces("the across-hosts cases")
        self.close()  # left over from a run that was killed
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            if _bridge_traffic_meets_iptables():  # br_netfilter: a FORWARD policy of DROP (Docker's) would cut it
                _run("iptables", "-I", *self._forward_rule)
            for name, address, veth in zip(self.names, self.addresses, self.veths):
                _run("ip", "netns", "add", name)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}ns")
                _run("ip", "link", "set", f"{veth}ns", "netns", name)
                _run("ip", "link", "set", veth, "master", self.bridge)
                _run("ip", "link", "set", veth, "up")
                self.run(name, "ip", "link", "set", f"{veth}ns", "name", "eth0")
                self.run(name, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
                self.run(name, "ip", "link", "set", "eth0", "up")
                self.run(name, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Ends what still runs in the hosts (a killed run's engines), then removes hosts, links and bridge."""
        for name in self.names:
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for veth in self.veths:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        while shutil.which("iptables") and subprocess.run(["iptables", "-D", *self._forward_rule],
                                                          capture_output=True).returncode == 0:
            pass

    def run(self, name: str, *cmd: str) -> str:
        return subprocess.run(["ip", "netns", "exec", name, *cmd], check=True, capture_output=True,
                              text=True).stdout

    def command(self, name: str, *cmd: str) -> list[str]:
        """`cmd` as run inside host `name`."""
        return ["ip", "netns", "exec", name, *cmd]

    def count_tcp_bytes(self, name: str, to: str) -> None:
        """Count the TCP bytes host `name` sends to address `to` from now on (an iptables rule with no target)."""
        rule = ["OUTPUT", "-p", "tcp", "-d", to]
        if subprocess.run(self.command(name, "iptables", "-C", *rule), capture_output=True).returncode != 0:
            self.run(name, "iptables", "-A", *rule)
        self.run(name, "iptables", "-Z", "OUTPUT")

    def tcp_bytes_sent(self, name: str, to: str) -> int:
        """What `count_tcp_bytes` counted so far."""
        for line in self.run(name, "iptables", "-L", "OUTPUT", "-v", "-x", "-n").splitlines():
            fields = line.split()  # pkts bytes (no target) prot opt in out source destination
            if len(fields) == 8 and fields[2] in ("tcp", "6") and fields[7] == to:
                return int(fields[1])
        raise AssertionError(f"no byte count from {name} to {to}; call count_tcp_bytes first")


def _bridge_traffic_meets_iptables() -> bool:
    try:
        return open("/proc/sys/net/bridge/bridge-nf-call-iptables").read().strip() == "1"
    except OSError:
        return False
