"""Whether this run is CI's, read one way by every part of the suite (and by .ci/run, which accepts the same
values): CI=1, true or yes, in any case, blanks around it ignored. In CI nothing may be skipped."""

from __future__ import annotations

import os

CI_VALUES = ("1", "true", "yes")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in CI_VALUES
