"""`ascend-pd plan` writes placement.png beside pareto.png, and the map it draws is the deployment's placement."""

import json

import pytest
import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.deploy import Deployment, load_deployment
from ascend_pd.planner.placement_map import device_owners


def plan(tmp_path, model: str, cluster: str) -> None:
    result = CliRunner().invoke(cli, ["plan", "--model", model, "--cluster", cluster, "--out", str(tmp_path),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    json.loads(result.output)


def listed_devices(path) -> dict[tuple[str, int], str]:
    """(node, device) -> instance name, read from the YAML as written, not through the schema."""
    listed: dict[tuple[str, int], str] = {}
    for instance in yaml.safe_load(path.read_text())["instances"]:
        for placement in instance["devices"]:
            for device in placement["devices"]:
                assert (placement["node"], device) not in listed, "a device listed twice"
                listed[(placement["node"], device)] = instance["name"]
    return listed


@pytest.mark.parametrize("model, cluster", [("qwen3-32b", "atlas-800i-a2-x4"), ("deepseek-r1", "cloudmatrix384")])
def test_plan_writes_a_placement_map_of_its_deployments_devices(tmp_path, model, cluster):
    plan(tmp_path, model, cluster)
    picture = tmp_path / "placement.png"
    assert picture.stat().st_size > 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    owners = device_owners(load_deployment(tmp_path / "deployment.yaml").deployment)
    assert {device: owner.instance for device, owner in owners.items()} == listed_devices(
        tmp_path / "deployment.yaml")


def test_each_dp_rank_of_an_instance_is_labelled_with_its_role_and_rank():
    deployment = Deployment.model_validate({
        "metadata": {"name": "map"}, "cluster": "atlas-800i-a2-x4", "model": {"name": "qwen3-32b", "path": "/models/Qwen3-32B"},
        "proxy": {"node": "a2-00", "port": 8080},
        "instances": [
            {"name": "p", "role": "prefill", "parallel": {"tp": 4}, "http_port": 8100, "kv_port": 30000,
             "devices": [{"node": "a2-00", "devices": [0, 1, 2, 3]}]},
            {"name": "d", "role": "decode", "parallel": {"tp": 4, "dp": 2}, "http_port": 8110, "kv_port": 30100,
             "devices": [{"node": "a2-01", "devices": [0, 1, 2, 3]}, {"node": "a2-01", "devices": [4, 5, 6, 7]}]},
        ]})
    owners = device_owners(deployment)
    assert len(owners) == 12
    assert {owners[("a2-00", d)].label() for d in range(4)} == {"P0"}
    assert {owners[("a2-01", d)].label() for d in range(4)} == {"D0"}
    assert {owners[("a2-01", d)].label() for d in range(4, 8)} == {"D0.1"}
    assert ("a2-00", 4) not in owners
