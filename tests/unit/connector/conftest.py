"""Makes the helper modules of this folder, and the stand-ins of tests/fakes, importable by the connector unit tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))
