"""The pictures of docs/pictures/ (tools/make_pictures.py): the link-tier graphs say what the cluster files say, the
KV flows name only messages and keys the code defines, and every picture the docs show is committed.

CI does not install graphviz and may skip nothing (tests/ci.py), so these tests run the tool's Python parts only:
the graphviz source of each cluster and the matplotlib drawings, never `dot` itself."""

import importlib.util
import re
import sys
from pathlib import Path

import msgspec
import pytest

from ascend_pd.connector import messages
from ascend_pd.deploy import handoff
from ascend_pd.hardware import load_cluster, shipped_clusters

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str):
    """A module of tools/, loaded from its file (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


flows_module = tool("picture_flows")
FLOWS, draw = flows_module.FLOWS, flows_module.draw
tiers_dot = tool("picture_tiers").tiers_dot


@pytest.mark.parametrize("name", sorted(shipped_clusters()))
def test_tier_graph_names_every_tier_of_the_cluster_with_its_bandwidth(name):
    import yaml

    document = yaml.safe_load(shipped_clusters()[name].read_text())  # the file itself, not the loader's reading
    source = tiers_dot(load_cluster(name))
    for level, tier in document["topology"].items():
        figures = document["links"][tier]
        assert f"<td>{level}</td><td>{tier}</td><td>{figures['bandwidth_gbytes_per_s']:g} GB/s</td>" in source
    nodes = sum(group["count"] for group in document["node_groups"])
    assert f"{nodes} nodes" in source


def test_tier_graph_joins_the_dies_of_a_910c_package_with_sio_and_the_superpods_with_roce():
    source = tiers_dot(load_cluster("cloudmatrix384-x2"))
    assert re.search(r'g0_n0_d0 -> g0_n0_d1 \[label="sio: 224 GB/s', source)
    assert re.search(r'g0_n0_d0 -> g1_n0_d0 \[label="roce: 50 GB/s, 8 us"', source)
    assert "SuperPoD 1: 48 nodes" in source


def test_flows_name_only_side_channel_messages_the_connector_defines():
    defined = {name for name, value in vars(messages).items()
               if isinstance(value, type) and issubclass(value, msgspec.Struct)}
    named = {word for flow in FLOWS for step in flow.steps if step.kind == "side"
             for word in re.findall(r"\b[A-Z][a-z]+[A-Z]\w*", step.text)}
    assert named and named <= defined, named - defined


def test_flows_name_only_kv_transfer_params_keys_the_handoff_contract_defines():
    keys = {field for value in vars(handoff).values()
            if isinstance(value, type) and issubclass(value, msgspec.Struct) for field in value.__struct_fields__}
    named = {word for flow in FLOWS for step in flow.steps
             for word in re.findall(r"\b(?:do|remote|transfer)_\w+|\bmetaserver\b(?=:)", step.text)}
    assert named and named <= keys, named - keys


def test_every_flow_is_drawn(tmp_path):
    for flow in FLOWS:
        draw(flow, tmp_path / f"{flow.name}.png")
        assert (tmp_path / f"{flow.name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_picture_the_docs_show_is_committed():
    shown = {m for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
             for m in re.findall(r"pictures/([\w.-]+\.png)", page.read_text(encoding="utf-8"))}
    expected = {"architecture.png", *(f"flow-{f.name}.png" for f in FLOWS),
                *(f"tiers-{name}.png" for name in shipped_clusters())}
    assert expected <= shown, f"not shown in the docs: {sorted(expected - shown)}"
    for name in shown:
        assert (ROOT / "docs" / "pictures" / name).stat().st_size > 0, name


def test_the_pictures_tool_draws_every_picture_or_names_the_package_it_needs(tmp_path):
    """With graphviz it writes every picture the docs show; without (as in CI) it says what to install."""
    import shutil
    import subprocess

    run = subprocess.run([sys.executable, str(ROOT / "tools" / "make_pictures.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    if shutil.which("dot") is None:
        assert run.returncode == 1 and "apt-get install -y graphviz" in run.stderr, run.stderr
        return
    assert run.returncode == 0, run.stderr
    for name in ("architecture.png", *(f"flow-{f.name}.png" for f in FLOWS),
                 *(f"tiers-{cluster}.png" for cluster in shipped_clusters())):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
