"""The preflight checks, one function each; every one returns a single pass/fail/skip line with its fix."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from ascend_pd.deploy.check.pins import pin_for
from ascend_pd.deploy.preflight.result import CheckResult, failed, passed, skipped
from ascend_pd.deploy.preflight.tools_output import (parse_ip, parse_key_values, parse_link, parse_npu_smi_info,
                                                     parse_ping_received, parse_tls_switch, version_key)

if TYPE_CHECKING:
    from ascend_pd.deploy.preflight.run import Site, Target

# Mooncake's Ascend direct transport needs CANN 8.3.RC1 or later (vllm-ascend maintainers, issue #5635).
MIN_CANN = "8.3.RC1"
DRIVER_TOOLS = "/usr/local/Ascend/driver/tools"


class Runner:
    """Runs the site's npu-smi and hccn_tool with the site's PATH."""

    def __init__(self, site: "Site"):
        self.site = site
        self.path = site.env.get("PATH", "")

    def find(self, tool: str) -> str | None:
        return shutil.which(tool, path=self.path) or shutil.which(tool, path=DRIVER_TOOLS)

    def run(self, tool: str, *args: str) -> tuple[int, str] | None:
        """(exit status, stdout + stderr), or None when the tool is not installed."""
        executable = self.find(tool)
        if executable is None:
            return None
        try:
            done = subprocess.run([executable, *args], capture_output=True, text=True, timeout=self.site.timeout_s,
                                  env=dict(self.site.env))
        except subprocess.TimeoutExpired:
            return 124, f"{tool} {' '.join(args)} did not answer within {self.site.timeout_s:g} s"
        return done.returncode, done.stdout + done.stderr


@dataclass(frozen=True)
class NpuCheck:
    result: CheckResult
    devices: tuple[int, ...]  # devices npu-smi lists, for checks that run without a deployment


def _ids(devices) -> str:
    return ",".join(str(d) for d in devices)


def ascend_skipped(target: "Target") -> CheckResult:
    return skipped("ascend", f"cluster '{target.cluster.name}' runs on CPUs: no NPU, link, CANN or driver checks")


def npu_smi(runner: Runner, target: "Target") -> NpuCheck:
    name = "npu-smi"
    output = runner.run("npu-smi", "info")
    if output is None:
        return NpuCheck(failed(name, "npu-smi is not installed or not on PATH",
                               "install the Ascend driver, or add /usr/local/bin to PATH"), ())
    status, text = output
    rows = parse_npu_smi_info(text)
    if status != 0 or not rows:
        return NpuCheck(failed(name, f"`npu-smi info` failed or listed no NPU (exit {status})",
                               "check the driver with `npu-smi info`; reload it or reboot the node"), ())
    devices = tuple(sorted(d for row in rows for d in row.devices))
    sick = [row for row in rows if row.health != "OK"]
    missing = sorted(set(target.devices) - set(devices))
    if sick:
        listed = ", ".join(f"NPU {r.npu} ({_ids(r.devices)}) {r.health}" for r in sick)
        return NpuCheck(failed(name, f"unhealthy: {listed}",
                               "see `npu-smi info -t health -i <npu>`; keep the deployment off these devices or "
                               "repair them"), devices)
    if missing:
        return NpuCheck(failed(name, f"devices {_ids(missing)} that the deployment uses are not present "
                                     f"(npu-smi lists {_ids(devices)})",
                               "fix the device ids in deployment.yaml or the node's driver"), devices)
    return NpuCheck(passed(name, f"{len(devices)} devices on {len(rows)} NPUs ({rows[0].name}), all OK"), devices)


def links(runner: Runner, devices) -> CheckResult:
    name = "hccn link"
    if not devices:
        return skipped(name, "no devices to check")
    down = []
    for device in devices:
        output = runner.run("hccn_tool", "-i", str(device), "-link", "-g")
        if output is None:
            return failed(name, "hccn_tool is not installed", f"install the Ascend driver (it ships {DRIVER_TOOLS})")
        if parse_link(output[1]) != "UP":
            down.append(device)
    if down:
        return failed(name, f"link not UP on devices {_ids(down)}",
                      "check cabling and switch ports; `hccn_tool -i <id> -link_stat -g` shows the flaps")
    return passed(name, f"UP on devices {_ids(devices)}")


def device_ips(runner: Runner, target: "Target", devices) -> CheckResult:
    name = "hccn ip"
    if not devices:
        return skipped(name, "no devices to check")
    unset, wrong = [], []
    for device in devices:
        output = runner.run("hccn_tool", "-i", str(device), "-ip", "-g")
        if output is None:
            return failed(name, "hccn_tool is not installed", f"install the Ascend driver (it ships {DRIVER_TOOLS})")
        ip = parse_ip(output[1])
        expected = target.cluster.device(target.node.name, device).device_ip if target.node else None
        if ip is None:
            unset.append(device)
        elif expected and ip != expected:
            wrong.append(f"{device}: {ip}, cluster says {expected}")
    if unset:
        return failed(name, f"no IP on devices {_ids(unset)}",
                      "set it: hccn_tool -i <id> -ip -s address <ip> netmask <mask> (and in /etc/hccn.conf)")
    if wrong:
        return failed(name, "device IPs differ from the cluster config: " + "; ".join(wrong),
                      "correct device_ip_start in the cluster file, or the device addresses")
    return passed(name, f"set on devices {_ids(devices)}" + (" and match the cluster config" if target.node else ""))


def tls(runner: Runner, devices) -> CheckResult:
    name = "hccn tls"
    if not devices:
        return skipped(name, "no devices to check")
    states: dict[int, int | None] = {}
    for device in devices:
        output = runner.run("hccn_tool", "-i", str(device), "-tls", "-g")
        if output is None:
            return failed(name, "hccn_tool is not installed", f"install the Ascend driver (it ships {DRIVER_TOOLS})")
        states[device] = parse_tls_switch(output[1])
    known = {s for s in states.values() if s is not None}
    if not known:
        return skipped(name, "this driver does not report a TLS switch")
    if len(known) > 1:
        on = [d for d, s in states.items() if s == 1]
        return failed(name, f"TLS is on for devices {_ids(on)} and off for the others",
                      "use one TLS setting on every device of the cluster: hccn_tool -i <id> -tls -s enable 0|1")
    return passed(name, f"TLS {'enabled' if known == {1} else 'disabled'} on every device")


def ping_peers(runner: Runner, target: "Target") -> CheckResult:
    name = "hccn ping"
    if not target.peers:
        return skipped(name, "no peer devices: pass --deployment (and --node if this host is not found by name or IP)")
    lost = []
    for peer in target.peers:
        output = runner.run("hccn_tool", "-i", str(peer.local_device), "-ping", "-g", "address", peer.ip)
        if output is None:
            return failed(name, "hccn_tool is not installed", f"install the Ascend driver (it ships {DRIVER_TOOLS})")
        counts = parse_ping_received(output[1])
        if counts is None or counts[1] == 0:
            lost.append(f"{peer.local_device} -> {peer.node} device {peer.device} ({peer.ip})")
    if lost:
        return failed(name, "no reply: " + "; ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else ""),
                      "check the RoCE network between these devices (switch VLANs, routes: hccn_tool -gateway)")
    nodes = sorted({p.node for p in target.peers})
    return passed(name, f"{len(target.peers)} peer devices on {', '.join(nodes)} answer")


def hccn_conf(site: "Site", target: "Target", devices) -> CheckResult:
    name = "hccn.conf"
    path = site.hccn_conf
    if not path.is_file():
        return failed(name, f"{path} is missing", "write it (address_<id>=, netmask_<id>= per device); the Ascend "
                                                   "direct transport and HCCL read it")
    pairs = parse_key_values(path.read_text(errors="replace"))
    missing = [d for d in devices if f"address_{d}" not in pairs]
    if missing:
        return failed(name, f"{path} has no address_<id> for devices {_ids(missing)}",
                      "add address_<id>=<device ip> for every device this node serves on")
    if target.node is not None:
        expected = {d: target.cluster.device(target.node.name, d).device_ip for d in devices}
        wrong = [d for d, ip in expected.items() if ip and pairs[f"address_{d}"] != ip]
        if wrong:
            return failed(name, f"addresses of devices {_ids(wrong)} differ from the cluster config",
                          "make /etc/hccn.conf and the cluster file agree")
    return passed(name, f"{path} lists devices {_ids(devices)}")


def _toolkit_version(site: "Site") -> tuple[str, str] | None:
    latest = site.ascend_root / "ascend-toolkit" / "latest"
    for info in sorted(latest.glob("*/ascend_toolkit_install.info")) + [latest / "version.cfg"]:
        if info.is_file():
            version = parse_key_values(info.read_text(errors="replace")).get("version")
            if version:
                return version, str(info)
    return None


def cann_version(site: "Site") -> CheckResult:
    name = "CANN"
    found = _toolkit_version(site)
    if found is None:
        return failed(name, f"no CANN toolkit under {site.ascend_root}/ascend-toolkit/latest",
                      f"install CANN {MIN_CANN} or later")
    version, source = found
    if version_key(version) < version_key(MIN_CANN):
        return failed(name, f"version {version} ({source}) is older than {MIN_CANN}",
                      f"upgrade CANN to {MIN_CANN} or later; the Ascend direct transport fails on older ones")
    return passed(name, f"version {version}")


def driver_version(site: "Site") -> CheckResult:
    name = "driver"
    info = site.ascend_root / "driver" / "version.info"
    if not info.is_file():
        return failed(name, f"{info} is missing", "install the Ascend NPU driver")
    version = parse_key_values(info.read_text(errors="replace")).get("version")
    if not version:
        return failed(name, f"{info} names no Version", "reinstall the Ascend NPU driver")
    return passed(name, f"version {version}")


def _site_python(site: "Site", code: str) -> subprocess.CompletedProcess:
    """`code` run by the Python ascend-pd runs under, in the site's environment (its PATH, LD_LIBRARY_PATH and
    PYTHONPATH decide what imports)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=site.timeout_s,
                          env=dict(site.env))


def mooncake(site: "Site") -> CheckResult:
    name = "mooncake"
    done = _site_python(site, "import mooncake.engine")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return failed(name, f"`import mooncake.engine` fails: {last}",
                      "pip install mooncake-transfer-engine-npu on NPUs (mooncake-transfer-engine-non-cuda on CPU "
                      "hosts); on NPUs also add its directory to LD_LIBRARY_PATH (the launchers do)")
    return passed(name, "import mooncake.engine works")


def vllm_ascend(site: "Site", target: "Target") -> CheckResult:
    """The vllm-ascend this node's Python holds against the release the deployment was planned for: what its
    unflagged engines do (graph mode, scheduling) and what render's flags were read against follow the release."""
    name = "vllm-ascend"
    done = _site_python(site, "import importlib.metadata as m; print(m.version('vllm-ascend'))")
    installed = done.stdout.strip()
    pin = pin_for("a2")  # A2 and A3 engines share the `ascend` extra's pin
    wanted = target.release or (f"a release in {pin.specifier}" if pin else "a release ascend-pd supports")
    if done.returncode != 0 or not installed:
        return failed(name, f"{sys.executable} holds no vllm-ascend",
                      f"install vllm-ascend {wanted} with the vLLM it was built for, or run the image "
                      "docker/Dockerfile builds")
    try:
        version = Version(installed)
    except InvalidVersion:  # a build from a source tree can carry any string; compare nothing on it
        return failed(name, f"{sys.executable} holds vllm-ascend '{installed}', which is not a release version",
                      f"install vllm-ascend {wanted}")
    if target.release is None:  # no deployment: the releases what render writes was read against
        if pin is None or pin.admits(installed):
            return passed(name, f"version {installed}")
        return failed(name, f"version {installed} is outside {pin.describe()}, the releases ascend-pd's "
                            "launchers and connectors were read against",
                      f"install a release in {pin.specifier}")
    if version != Version(target.release):
        return failed(name, f"version {installed} is installed, but the deployment was planned for {target.release} "
                            "(vllm_ascend_version): its graph mode, scheduling and host costs differ",
                      f"install vllm-ascend {target.release}, or plan again with --vllm-ascend-version {installed}")
    return passed(name, f"version {installed}, the deployment's")


def ports_free(target: "Target") -> CheckResult:
    name = "ports"
    if not target.ports:
        return skipped(name, "no ports to check: pass --deployment (and --node if this host is not found)")
    busy = []
    for port, owner in target.ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError:
                busy.append(f"{port} ({owner})")
    if busy:
        return failed(name, "in use: " + "; ".join(busy[:8]) + (f" and {len(busy) - 8} more" if len(busy) > 8 else ""),
                      "stop what holds them (ss -ltnp 'sport = :<port>'), or move the ports in deployment.yaml")
    return passed(name, f"{len(target.ports)} ports free")


def environment(site: "Site", target: "Target") -> CheckResult:
    name = "env"
    if target.on_cpu:
        return passed(name, "nothing required on CPU hosts")
    env = site.env
    if not (env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")):
        return failed(name, "the CANN environment is not loaded (no ASCEND_HOME_PATH)",
                      f"source {site.ascend_root}/ascend-toolkit/set_env.sh (in ~/.bashrc on every node)")
    return passed(name, "CANN environment loaded")
