"""Makes the helper modules of this folder importable and provides the CPU verification build of the kernels."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ascendc_cpu import StandIn, build_library  # noqa: E402


@pytest.fixture(scope="session")
def standin_library() -> Path:
    return build_library()


@pytest.fixture(scope="session")
def standin(standin_library) -> StandIn:
    return StandIn(standin_library)
