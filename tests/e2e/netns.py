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


def require_namespaces() -> None:
    """Namespaces need root, iproute2 and iptables (make test installs them); CI must have them, a developer's
    box without them skips these cases and says why."""
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    reason = (f"needs {', '.join(missing)} (apt-get install iproute2 iptables)" if missing else
              "needs root for network namespaces" if os.geteuid() != 0 else None)
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"the unreachable-peer cases {reason}")
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
