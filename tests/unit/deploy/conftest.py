"""Helpers for rule tests: start from a deployment of known shape, change one thing, validate, look at the codes.

The shapes come from tests/known_shapes.py (README.md in tests/fixtures/deployments/ says why); the CPU one is the
shipped example, which stays hand-written."""

import copy
from pathlib import Path

import pytest
import yaml

from ascend_pd.deploy import parse_deployment, validate
from ascend_pd.hardware import configs_dir
from tests.known_shapes import known_shape

EXAMPLES = configs_dir() / "deployments"


def example(name: str) -> dict:
    return yaml.safe_load(known_shape(name).read_text())


def diagnose(data: dict):
    return validate(parse_deployment(yaml.safe_dump(data), "test.yaml"))


def codes(data: dict, severity: str | None = None) -> set[str]:
    return {d.code for d in diagnose(data) if severity is None or d.severity == severity}


@pytest.fixture
def cm384():
    return copy.deepcopy(example("cloudmatrix384-deepseek-r1"))


@pytest.fixture
def a2():
    return copy.deepcopy(example("atlas-800i-a2-x4-qwen3-32b"))


@pytest.fixture
def a3():
    return copy.deepcopy(example("atlas-800t-a3-x4-deepseek-r1"))


@pytest.fixture
def cpu():
    return copy.deepcopy(example("local-cpu-tiny-gqa"))


def example_paths() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))
