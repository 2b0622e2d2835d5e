"""The shipped example deployments are clean, load back from their own dump, and break the way the docs say."""

import pytest
import yaml

from ascend_pd.deploy import dump_deployment, load_deployment, parse_deployment, validate
from tests.cli_runner import run_cli

from .conftest import example_paths

CLUSTERS = {"atlas-800i-a2-x4", "atlas-800t-a3-x4", "cloudmatrix384", "cloudmatrix384-x2", "local-cpu"}


def test_there_is_an_example_for_every_shipped_cluster():
    assert {load_deployment(p).deployment.cluster for p in example_paths()} >= CLUSTERS


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_example_has_no_errors_or_warnings(path):
    diagnostics = validate(load_deployment(path))
    assert [d for d in diagnostics if d.severity != "info"] == []


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_dump_round_trips(path):
    deployment = load_deployment(path).deployment
    again = parse_deployment(dump_deployment(deployment)).deployment
    assert again == deployment
    assert dump_deployment(again) == dump_deployment(deployment)


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_cli_exits_0_on_example_and_1_with_a_device_used_twice(path, tmp_path):
    ok = run_cli("validate", str(path))
    assert ok.returncode == 0, ok.stdout + ok.stderr

    data = yaml.safe_load(path.read_text())
    first, last = data["instances"][0], data["instances"][-1]
    last["devices"][0]["node"] = first["devices"][0]["node"]
    last["devices"][0]["devices"][0] = first["devices"][0]["devices"][0]
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(data))
    bad = run_cli("validate", str(broken))
    assert bad.returncode == 1
    assert "APD104" in bad.stdout
    assert f"'{first['name']}'" in bad.stdout and f"'{last['name']}'" in bad.stdout
