"""`ascend-pd cluster new` writes a cluster file for a site's own nodes, from their names and addresses or from what
each node's npu-smi, hccn_tool and ip printed, that `show cluster` loads and `plan` plans on; bad input exits 2
naming the flag or field."""

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from ascend_pd.deploy.preflight.node_reports import HOST_IP_FILE, NPU_SMI_FILE, hccn_ip_file
from ascend_pd.hardware import load_cluster
from tests.cli_runner import run_cli

FAKES = Path(__file__).resolve().parents[2] / "fakes" / "bin"
MODELINE = "# yaml-language-server: $schema="


def new_cluster(tmp_path, *args: str):
    out = tmp_path / "site" / "cluster.yaml"
    return out, run_cli("cluster", "new", "--name", "site", *args, "--out", str(out))


def test_nodes_at_scattered_addresses_load_at_exactly_those_addresses_and_plan(tmp_path):
    out, result = new_cluster(tmp_path, "--node-type", "atlas-800i-a2", "--interface", "bond0",
                              "--node", "infer-a=10.3.7.21,10.90.0.1", "--node", "gpu-x=172.20.1.4,10.90.4.100")
    assert result.returncode == 0, result.stderr
    cluster = load_cluster(str(out))
    assert [(n.name, n.host_ip, n.interface) for n in cluster.nodes] == [
        ("infer-a", "10.3.7.21", "bond0"), ("gpu-x", "172.20.1.4", "bond0")]
    assert [d.device_ip for d in cluster.node_devices("gpu-x")] == [f"10.90.4.{100 + d}" for d in range(8)]
    # the node type's figures are the shipped A2 cluster's
    shipped = load_cluster("atlas-800i-a2-x4")
    assert (cluster.links, cluster.topology, cluster.protocols) == (shipped.links, shipped.topology, shipped.protocols)
    assert out.read_text().startswith(MODELINE + "cluster.schema.json\n")
    assert (out.parent / "cluster.schema.json").is_file()
    assert run_cli("show", "cluster", str(out)).returncode == 0

    plan_dir = tmp_path / "plan"
    planned = run_cli("plan", "--model", "qwen3-32b", "--cluster", str(out), "--out", str(plan_dir))
    assert planned.returncode == 0, planned.stderr
    deployment_text = (plan_dir / "deployment.yaml").read_text()
    assert deployment_text.startswith(MODELINE + "deployment.schema.json\n")
    assert (plan_dir / "deployment.schema.json").is_file()
    placed = {p["node"] for i in yaml.safe_load(deployment_text)["instances"] for p in i["devices"]}
    assert placed <= {"infer-a", "gpu-x"} and placed
    assert run_cli("validate", str(plan_dir / "deployment.yaml")).returncode == 0
    for written, schema in ((out, "cluster.schema.json"), (plan_dir / "deployment.yaml", "deployment.schema.json")):
        jsonschema.validate(yaml.safe_load(written.read_text()), json.loads((written.parent / schema).read_text()))


def save_reports(node_dir: Path, devices: int, device_ips: list[str], ip_line: str) -> None:
    """What an operator saves on one node, made by running the stand-ins for npu-smi and hccn_tool (tests/fakes/bin,
    which print the drivers' formats) as docs/deployments.md says to run the real ones."""
    env = {**os.environ, "FAKE_NPU_CHIPS": str(devices), "FAKE_HCCN_IPS": ",".join(device_ips)}
    node_dir.mkdir(parents=True)
    smi = subprocess.run([str(FAKES / "npu-smi"), "info"], capture_output=True, text=True, env=env, check=True)
    (node_dir / NPU_SMI_FILE).write_text(smi.stdout)
    for device in range(devices):
        hccn = subprocess.run([str(FAKES / "hccn_tool"), "-i", str(device), "-ip", "-g"], capture_output=True,
                              text=True, env=env, check=True)
        (node_dir / hccn_ip_file(device)).write_text(hccn.stdout)
    (node_dir / HOST_IP_FILE).write_text(ip_line)


def ip_addr_line(interface: str, address: str) -> str:
    """One line of `ip -o -4 addr show dev IFACE`."""
    return (f"2: {interface}    inet {address}/24 brd {address.rsplit('.', 1)[0]}.255 scope global {interface}\\"
            "       valid_lft forever preferred_lft forever\n")


def test_reports_of_a3_nodes_give_their_names_addresses_and_device_addresses(tmp_path):
    reports = tmp_path / "reports"
    consecutive = [f"10.20.0.{1 + d}" for d in range(16)]
    per_die_subnet = [f"10.{30 + d}.0.5" for d in range(16)]
    save_reports(reports / "a3-east", 16, consecutive, ip_addr_line("enp189s0f0", "10.0.5.11"))
    save_reports(reports / "a3-west", 16, per_die_subnet, ip_addr_line("enp189s0f0", "10.0.9.200"))
    out, result = new_cluster(tmp_path, "--node-type", "atlas-800t-a3", "--from-reports", str(reports))
    assert result.returncode == 0, result.stderr
    cluster = load_cluster(str(out))
    assert [(n.name, n.host_ip, n.interface) for n in cluster.nodes] == [
        ("a3-east", "10.0.5.11", "enp189s0f0"), ("a3-west", "10.0.9.200", "enp189s0f0")]
    assert [d.device_ip for d in cluster.node_devices("a3-east")] == consecutive
    assert [d.device_ip for d in cluster.node_devices("a3-west")] == per_die_subnet
    group = yaml.safe_load(out.read_text())["node_groups"][0]
    assert group["nodes"][0]["device_ip_start"] == "10.20.0.1"  # consecutive addresses are written as their start


def test_reports_of_a_node_of_another_type_are_refused(tmp_path):
    reports = tmp_path / "reports"
    save_reports(reports / "n1", 8, [f"10.20.0.{1 + d}" for d in range(8)], ip_addr_line("eth0", "10.0.5.11"))
    _, result = new_cluster(tmp_path, "--node-type", "atlas-800t-a3", "--from-reports", str(reports))
    assert result.returncode == 2
    assert NPU_SMI_FILE in result.stderr and "--node-type" in result.stderr


def test_a_device_without_an_address_in_the_reports_is_refused(tmp_path):
    reports = tmp_path / "reports"
    save_reports(reports / "n1", 8, [f"10.20.0.{1 + d}" for d in range(5)], ip_addr_line("eth0", "10.0.5.11"))
    _, result = new_cluster(tmp_path, "--node-type", "atlas-800i-a2", "--from-reports", str(reports))
    assert result.returncode == 2
    assert hccn_ip_file(5) in result.stderr and "hccn_tool -i 5 -ip" in result.stderr


@pytest.mark.parametrize(("args", "named"), [
    (["--node-type", "atlas-800i-a2", "--node", "n1=10.0.0.1", "--node", "n1=10.0.0.2"], "nodes[1].name"),
    (["--node-type", "atlas-800i-a2", "--node", "n1=10.0.0.1", "--node", "n2=10.0.0.1"], "nodes[1].host_ip"),
    (["--node-type", "atlas-800i-a2", "--node", "n1=10.0.0.999"], "--node"),
    (["--node-type", "atlas-800i-a2", "--node", "n1"], "--node"),
    (["--node-type", "atlas-800i-a2", "--node", "bad/name=10.0.0.1"], "nodes[0].name"),
    (["--node-type", "atlas-900-z9", "--node", "n1=10.0.0.1"], "--node-type"),
    (["--node-type", "atlas-800i-a2"], "--node"),
    (["--node-type", "atlas-800i-a2", "--node", "n1=10.0.0.1", "--interface", "eth0;reboot"], "--interface"),
])
def test_bad_input_exits_2_naming_the_field(tmp_path, args, named):
    out, result = new_cluster(tmp_path, *args)
    assert result.returncode == 2, result.stdout
    assert named in result.stderr and "fix:" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
