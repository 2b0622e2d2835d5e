"""ascend-pd preflight against stand-in npu-smi and hccn_tool executables (tests/fakes/bin) that print the real
output formats, with a stand-in CANN/driver tree: each fault shows as one FAIL line naming what is wrong."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.preflight import Site, run_preflight
from ascend_pd.deploy.preflight.run import target_for
from ascend_pd.hardware import configs_dir
from tests.known_shapes import known_shape
from tests.ports import free_port

pytestmark = pytest.mark.integration

FAKES = Path(__file__).resolve().parents[2] / "fakes" / "bin"
A2_EXAMPLE = known_shape("atlas-800i-a2-x4-qwen3-32b")
CPU_EXAMPLE = configs_dir() / "deployments" / "local-cpu-tiny-gqa.yaml"
# atlas-800i-a2-x4 numbers device IPs from 192.168.100.1, 8 per node: a2-02 holds .17 to .24.
A2_02_IPS = [f"192.168.100.{17 + d}" for d in range(8)]


@pytest.fixture
def healthy_a2_node(tmp_path):
    root = tmp_path / "Ascend"
    (root / "driver").mkdir(parents=True)
    (root / "driver" / "version.info").write_text("Version=24.1.rc2\nascendhal_version=7.35.19\n")
    toolkit = root / "ascend-toolkit" / "latest" / "aarch64-linux"
    toolkit.mkdir(parents=True)
    (toolkit / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.3.RC1\n")
    hccn = tmp_path / "hccn.conf"
    hccn.write_text("".join(f"address_{d}={ip}\nnetmask_{d}=255.255.255.0\n" for d, ip in enumerate(A2_02_IPS)))
    site_packages = tmp_path / "site-packages"  # the node's Python holds the release the deployment pins
    install_distribution(site_packages, "vllm-ascend", VLLM_ASCEND_RELEASE)
    env = {**os.environ, "PATH": f"{FAKES}:{os.environ['PATH']}", "ASCEND_HOME_PATH": str(root),
           "FAKE_NPU_CHIPS": "8", "FAKE_HCCN_IPS": ",".join(A2_02_IPS),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site_packages), os.environ.get("PYTHONPATH")]))}
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    env.pop("HCCL_IF_IP", None)
    return {"ascend_root": root, "hccn_conf": hccn, "env": env}


def install_distribution(site_packages: Path, name: str, version: str) -> None:
    """What pip leaves for importlib.metadata to read: vllm-ascend itself installs only on Ascend hosts."""
    for old in site_packages.glob(f"{name.replace('-', '_')}-*.dist-info"):
        (old / "METADATA").unlink()
        old.rmdir()
    dist_info = site_packages / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def run(site_args, deployment=A2_EXAMPLE, node="a2-02", **env_changes):
    args = dict(site_args)
    args["env"] = {**args["env"], **env_changes}
    target = target_for(load_deployment(deployment), node)
    return {r.name: r for r in run_preflight(Site(**args), target)}


def test_a_healthy_node_passes_every_device_and_software_check(healthy_a2_node):
    results = run(healthy_a2_node)
    for name in ("npu-smi", "hccn link", "hccn ip", "hccn tls", "hccn ping", "hccn.conf", "CANN", "driver",
                 "vllm-ascend", "mooncake", "env"):
        assert results[name].status == "pass", results[name].line()
    assert "8 devices" in results["npu-smi"].detail
    # decode-0 on a2-02 talks to the four prefill instances on a2-00 and a2-01: 8 devices x 2 nodes
    assert results["hccn ping"].detail.startswith("16 peer devices on a2-00, a2-01")


def test_an_unhealthy_npu_fails_npu_smi_naming_it(healthy_a2_node):
    result = run(healthy_a2_node, FAKE_NPU_UNHEALTHY="3")["npu-smi"]
    assert result.status == "fail" and "NPU 3" in result.detail and "Warning" in result.detail


def test_a3_table_counts_two_devices_per_npu(healthy_a2_node):
    deployment = known_shape("atlas-800t-a3-x4-deepseek-r1")
    result = run(healthy_a2_node, deployment=deployment, node="a3-02", FAKE_NPU_CHIPS="16")["npu-smi"]
    assert result.status == "pass" and result.detail.startswith("16 devices on 8 NPUs")


def test_devices_missing_from_npu_smi_fail(healthy_a2_node):
    result = run(healthy_a2_node, FAKE_NPU_CHIPS="4")["npu-smi"]
    assert result.status == "fail" and "4,5,6,7" in result.detail


def test_a_link_down_fails_naming_the_device(healthy_a2_node):
    result = run(healthy_a2_node, FAKE_HCCN_DOWN="5")["hccn link"]
    assert result.status == "fail" and result.detail == "link not UP on devices 5"


def test_a_device_ip_that_differs_from_the_cluster_fails(healthy_a2_node):
    ips = list(A2_02_IPS)
    ips[2] = "10.0.0.3"
    result = run(healthy_a2_node, FAKE_HCCN_IPS=",".join(ips))["hccn ip"]
    assert result.status == "fail" and "2: 10.0.0.3, cluster says 192.168.100.19" in result.detail


def test_mixed_tls_settings_fail(healthy_a2_node):
    result = run(healthy_a2_node, FAKE_HCCN_TLS_ON="0,1")["hccn tls"]
    assert result.status == "fail" and "0,1" in result.detail


def test_an_unreachable_peer_fails_naming_it(healthy_a2_node):
    # a2-00's device 0 is 192.168.100.1
    result = run(healthy_a2_node, FAKE_HCCN_UNREACHABLE="192.168.100.1")["hccn ping"]
    assert result.status == "fail" and "0 -> a2-00 device 0 (192.168.100.1)" in result.detail


def test_old_cann_and_missing_files_fail_with_fixes(healthy_a2_node):
    info = next(healthy_a2_node["ascend_root"].rglob("ascend_toolkit_install.info"))
    info.write_text("version=8.0.RC3\n")
    healthy_a2_node["hccn_conf"].unlink()
    (healthy_a2_node["ascend_root"] / "driver" / "version.info").unlink()
    results = run(healthy_a2_node)
    assert results["CANN"].status == "fail" and "8.0.RC3" in results["CANN"].detail
    assert results["hccn.conf"].status == "fail" and results["hccn.conf"].fix
    assert results["driver"].status == "fail"


def test_a_vllm_ascend_other_than_the_deployments_release_fails_naming_both(healthy_a2_node, tmp_path):
    install_distribution(tmp_path / "site-packages", "vllm-ascend", "0.23.0")
    result = run(healthy_a2_node)["vllm-ascend"]
    assert result.status == "fail"
    assert "0.23.0 is installed" in result.detail and f"planned for {VLLM_ASCEND_RELEASE}" in result.detail
    assert result.fix == (f"install vllm-ascend {VLLM_ASCEND_RELEASE}, or plan again with --vllm-ascend-version "
                          "0.23.0")
    data = yaml.safe_load(A2_EXAMPLE.read_text())
    data["vllm_ascend_version"] = "v0.23.0"  # a deployment planned for the release the node has
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(yaml.safe_dump(data))
    assert run(healthy_a2_node, deployment=deployment)["vllm-ascend"].status == "pass"


def test_a_vllm_ascend_built_from_a_source_tree_fails_instead_of_crashing(healthy_a2_node, tmp_path):
    install_distribution(tmp_path / "site-packages", "vllm-ascend", "main")  # not a PEP 440 version
    result = run(healthy_a2_node)["vllm-ascend"]
    assert result.status == "fail" and "'main'" in result.detail and VLLM_ASCEND_RELEASE in result.fix


def test_a_node_without_vllm_ascend_fails(healthy_a2_node, tmp_path):
    result = run(healthy_a2_node, PYTHONPATH=str(tmp_path / "nothing-installed"))["vllm-ascend"]
    assert result.status == "fail" and "holds no vllm-ascend" in result.detail and VLLM_ASCEND_RELEASE in result.fix


def test_without_the_cann_environment_env_fails(healthy_a2_node):
    healthy_a2_node["env"].pop("ASCEND_HOME_PATH")
    result = run(healthy_a2_node)["env"]
    assert result.status == "fail" and "set_env.sh" in result.fix


def test_missing_npu_smi_fails_instead_of_crashing(healthy_a2_node):
    result = run(healthy_a2_node, PATH="/usr/bin:/bin")["npu-smi"]
    assert result.status == "fail" and "not installed" in result.detail


def test_a_busy_port_fails_naming_its_owner(healthy_a2_node, tmp_path):
    """local-cpu-tiny-gqa's prefill-0 binds its side-channel port on this host (moved to a free one here)."""
    data = yaml.safe_load(CPU_EXAMPLE.read_text())
    for instance in data["instances"]:
        instance["kv_port"] = free_port()
    port = data["instances"][0]["kv_port"]
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(yaml.safe_dump(data))
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        try:
            holder.bind(("0.0.0.0", port))
        except OSError:
            pytest.fail(f"port {port} is already taken on this machine; the test needs it to hold it itself")
        holder.listen()
        results = run(healthy_a2_node, deployment=deployment, node="localhost-00")
    assert results["ports"].status == "fail"
    assert f"{port} (instance 'prefill-0' DP rank 0 worker 0)" in results["ports"].detail
    assert results["ascend"].status == "skip"


def test_cli_prints_one_line_per_check_and_exits_1_on_a_failure(healthy_a2_node):
    env = {**healthy_a2_node["env"], "FAKE_HCCN_DOWN": "0"}
    done = subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", "preflight", "--deployment", str(A2_EXAMPLE),
                           "--node", "a2-02", "--ascend-root", str(healthy_a2_node["ascend_root"]),
                           "--hccn-conf", str(healthy_a2_node["hccn_conf"])],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    checks = [line for line in lines if line.split()[0] in {"PASS", "FAIL", "SKIP"}]
    assert len(checks) == 12
    assert "FAIL hccn link: link not UP on devices 0 -- fix:" in done.stdout
