"""Planning, validating, rendering and simulating SuperClusters of many CloudMatrix384 SuperPoDs (cluster files made
by tools/make_cluster.py, as a user describes one)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ascend_pd.deploy import load_deployment, validate, write_deployment
from ascend_pd.deploy.rules.base import Context
from ascend_pd.deploy.rules.ports import port_claims
from ascend_pd.perf.context import cost_model
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.replicas import identical_groups
from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD
from ascend_pd.render import RenderOptions, render_bundle

REPO = Path(__file__).resolve().parents[3]


def supercluster(tmp_path: Path, superpods: int) -> Path:
    path = tmp_path / f"cm384-x{superpods}.yaml"
    subprocess.run([sys.executable, str(REPO / "tools" / "make_cluster.py"), "--superpods", str(superpods),
                    "--out", str(path)], check=True, capture_output=True)
    return path


def planned(tmp_path: Path, superpods: int):
    cluster = supercluster(tmp_path, superpods)
    cost = cost_model("deepseek-r1", str(cluster))
    outcome = make_plan(cost, PlanInputs(DEFAULT_WORKLOAD, DEFAULT_SLO, cluster_ref=str(cluster)))
    path = tmp_path / "deployment.yaml"
    write_deployment(outcome.deployment, path)
    return outcome, load_deployment(path)


@pytest.fixture(scope="module")
def sixty_four(tmp_path_factory):
    return planned(tmp_path_factory.mktemp("cm64"), 64)


def test_64_superpods_plan_with_every_port_in_range_and_validate_clean(sixty_four):
    outcome, loaded = sixty_four
    assert outcome.predicted["devices"] == 64 * 768
    claims = port_claims(Context.build(loaded))
    assert max(c.port for c in claims) <= 65535
    # One sequence of side-channel ports across the cluster, from 36000, would run past 65535.
    assert 36000 + sum(i.kv_port_count for i in loaded.deployment.instances) > 65535
    errors = [d for d in validate(loaded) if d.severity == "error"]
    assert errors == []


def test_64_superpods_every_host_starts_its_ports_afresh(sixty_four):
    _, loaded = sixty_four
    ports: dict[tuple[str, str], list[int]] = {}
    for claim in port_claims(Context.build(loaded)):
        ports.setdefault((claim.host, claim.kind), []).append(claim.port)
    assert len({host for host, kind in ports if kind == "kv"}) == 64 * 48
    # Every host's ports lie within what its own instances need: none of them exceeds a SuperPoD.
    for (host, kind), used in ports.items():
        if kind == "kv":
            assert 36000 <= min(used) and max(used) < 36000 + 768, host
        elif kind == "http":
            assert 8100 <= min(used) and max(used) < 8100 + 768, host


def test_64_superpods_are_64_identical_groups(sixty_four):
    _, loaded = sixty_four
    replicas = identical_groups(loaded.deployment, loaded.cluster())
    assert replicas is not None and replicas.count == 64
    assert len(replicas.group.instances) * 64 == len(loaded.deployment.instances)


def test_10_superpods_render_a_launcher_per_node_and_k8s(tmp_path):
    _, loaded = planned(tmp_path, 10)
    result = render_bundle(loaded, RenderOptions(target="all"))
    assert not result.refused
    launchers = [name for name in result.files if name.startswith("launch-") and name != "launch-proxy.sh"]
    assert len(launchers) == 10 * 48
    instances = len(loaded.deployment.instances)
    manifests = "".join(text for name, text in result.files.items() if name.startswith("k8s/"))
    assert manifests.count("\nkind: Deployment\n") + manifests.count("\nkind: LeaderWorkerSet\n") >= instances


def test_nodes_of_64_devices_plan_validate_and_render(tmp_path):
    """The Ascend transport's ephemeral range on a 64-device node runs past 65535, so side channels go below it."""
    import yaml

    from ascend_pd.hardware import configs_dir

    source = yaml.safe_load((configs_dir() / "clusters" / "cloudmatrix384.yaml").read_text())
    for node_type in source["node_types"].values():
        node_type["devices"] = 64
    for group in source["node_groups"]:
        group["count"] = 12
    cluster = tmp_path / "wide-nodes.yaml"
    cluster.write_text(yaml.safe_dump({**source, "name": "wide-nodes"}))
    cost = cost_model("deepseek-r1", str(cluster))
    outcome = make_plan(cost, PlanInputs(DEFAULT_WORKLOAD, DEFAULT_SLO, cluster_ref=str(cluster)))
    path = tmp_path / "deployment.yaml"
    write_deployment(outcome.deployment, path)
    loaded = load_deployment(path)
    assert [d for d in validate(loaded) if d.severity == "error"] == []
    assert not render_bundle(loaded, RenderOptions(target="all")).refused
