"""Makes the helper modules of this folder (kv_data) importable by the connector integration tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
