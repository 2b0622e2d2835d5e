"""Deployments of known shape for tests that name an instance, a node or a port: the hand-written files under
tests/fixtures/deployments/ (README.md there says why), or the shipped example where none is kept (the CPU one)."""

from pathlib import Path

from ascend_pd.hardware import configs_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deployments"


def known_shape(name: str) -> Path:
    fixture = FIXTURES / f"{name}.yaml"
    return fixture if fixture.exists() else configs_dir() / "deployments" / f"{name}.yaml"
