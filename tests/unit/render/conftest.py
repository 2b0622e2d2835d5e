"""Shared helpers for render tests: load a shipped example, or a deployment of known shape with one change, and
render it. The known shapes come from tests/known_shapes.py (README.md in tests/fixtures/deployments/ says why):
tests that name an instance or a node start from them; tests over every shipped example use the examples."""

import copy
from pathlib import Path

import pytest
import yaml

from ascend_pd.deploy import load_deployment, parse_deployment
from ascend_pd.hardware import configs_dir
from ascend_pd.render import RenderOptions, plan_processes, render_bundle
from tests.known_shapes import known_shape

EXAMPLES = configs_dir() / "deployments"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))

def example_data(name: str) -> dict:
    return copy.deepcopy(yaml.safe_load(known_shape(name).read_text()))


def loaded_from(data: dict):
    return parse_deployment(yaml.safe_dump(data), "test.yaml")


def plan_of(data: dict, **overrides):
    return plan_processes(loaded_from(data), **overrides)


def bundle_of(name: str, options: RenderOptions = RenderOptions()):
    """The shipped example `name` rendered."""
    return render_bundle(load_deployment(EXAMPLES / f"{name}.yaml"), options)


def known_bundle(name: str, options: RenderOptions = RenderOptions()):
    """The deployment of known shape `name` rendered."""
    return render_bundle(load_deployment(known_shape(name)), options)


@pytest.fixture
def a2_example() -> dict:
    return example_data("atlas-800i-a2-x4-qwen3-32b")


@pytest.fixture
def a3_example() -> dict:
    return example_data("atlas-800t-a3-x4-deepseek-r1")


@pytest.fixture
def cpu_example() -> dict:
    return example_data("local-cpu-tiny-gqa")


@pytest.fixture
def cm384_example() -> dict:
    return example_data("cloudmatrix384-deepseek-r1")


def golden_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "golden"
