"""The shipped example deployments are what `ascend-pd plan` writes with the command in their header
(tools/make_examples.py), or say in their header why they are written by hand."""

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import example_paths

TOOL = Path(__file__).resolve().parents[3] / "tools" / "make_examples.py"


def _tool():
    spec = importlib.util.spec_from_file_location("make_examples", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves its annotations through the module
    spec.loader.exec_module(module)
    return module


make_examples = _tool()
PLANNED = {e.name: e for e in make_examples.EXAMPLES}


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_a_planned_example_is_exactly_what_its_recorded_command_writes(name):
    example = PLANNED[name]
    shipped = make_examples.example_path(example).read_text(encoding="utf-8")
    assert shipped == make_examples.example_text(example), (
        f"{name}.yaml drifted from its plan: run python tools/make_examples.py and review the diff")


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_the_header_gives_the_plan_command_with_an_explicit_calibration(name):
    header = [line for line in make_examples.example_path(PLANNED[name]).read_text().splitlines()
              if line.startswith("#")]
    command = next(line[1:].strip() for line in header if line.lstrip("# ").startswith("ascend-pd plan"))
    args = shlex.split(command)
    assert args[:2] == ["ascend-pd", "plan"]
    assert "--calibration" in args  # the example does not move when the default profile does


@pytest.mark.parametrize("name", sorted(PLANNED))
def test_a_planned_example_still_shows_disaggregated_serving(name):
    roles = {i["role"] for i in yaml.safe_load(make_examples.example_path(PLANNED[name]).read_text())["instances"]}
    assert roles == {"prefill", "decode"}


def test_the_two_superpod_example_runs_a_serving_group_in_each_superpod():
    from ascend_pd.hardware import load_cluster

    data = yaml.safe_load(make_examples.example_path(PLANNED["cloudmatrix384-x2-deepseek-r1"]).read_text())
    pod_of = {n.name: n.superpod for n in load_cluster(data["cluster"]).nodes}
    for role in ("prefill", "decode"):
        pods = {pod_of[p["node"]] for i in data["instances"] if i["role"] == role for p in i["devices"]}
        assert len(pods) == 2, role
    for instance in data["instances"]:  # and no instance, so no KV hand-off inside one, leaves its SuperPoD
        assert len({pod_of[p["node"]] for p in instance["devices"]}) == 1


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_every_shipped_example_is_planned_or_says_why_it_is_written_by_hand(path):
    if path.stem in PLANNED:
        return
    header = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "Written by hand, not by tools/make_examples.py:" in header


def test_the_tool_keeps_a_leading_schema_line_and_drops_the_one_plan_writes():
    example = PLANNED["cloudmatrix384-deepseek-r1"]
    schema = "# yaml-language-server: $schema=../schemas/deployment.schema.json"
    header = make_examples._header(example, schema)
    assert header.splitlines()[0] == schema
    assert not make_examples._header(example, None).startswith(make_examples.SCHEMA_LINE)
    planned = make_examples.planned_yaml(example)
    assert not planned.startswith(make_examples.SCHEMA_LINE) and planned.startswith("apiVersion:")
