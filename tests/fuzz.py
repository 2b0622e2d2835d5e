"""How much fuzzing a run does, set by the Hypothesis profile tests/conftest.py loads: CI's profile runs every
fuzz test at its full size, the local one at a quarter of it for a quicker answer while working."""

from __future__ import annotations

import math

from hypothesis import settings

FULL_EXAMPLES = 100  # Hypothesis's own default: a profile with this many examples runs every count in full


def examples(full: int, least: int = 10) -> int:
    """`full` scaled by the active profile's share, never below `least` (nor above `full`)."""
    share = settings.default.max_examples / FULL_EXAMPLES
    return min(full, max(least, math.ceil(full * share)))
