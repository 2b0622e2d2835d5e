"""The vllm-ascend release an engine runs: what its unflagged launch resolves to (graph mode, async scheduling) and
which era of host costs prices it. Every version-dependent fact of the engine is stated here once, with the release
it changed in (docs/vllm-ascend.md says where each was read).
"""

from __future__ import annotations

from functools import cache

from packaging.version import InvalidVersion, Version

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.errors import InputError

# vllm-ascend's platform.py turned vLLM's default cudagraph mode FULL_AND_PIECEWISE into PIECEWISE from v0.11.0rc0
# (commit 2930e4a, #3182) through v0.20.2rc1; #9572 (commit 1bb58b5) dropped the conversion, first released in
# v0.21.0rc1. Releases before v0.11 inherited vLLM's PIECEWISE default of the time.
FULL_AND_PIECEWISE_SINCE = Version("0.21.0rc1")
# vLLM schedules asynchronously unless told not to from 0.14, which vllm-ascend v0.14.0rc1 is built on; vllm-ascend's
# platform keeps vLLM's choice (read at v0.13.0rc1, v0.20.2rc1, v0.25.1rc1).
ASYNC_SCHEDULING_SINCE = Version("0.14.0rc1")


@cache
def engine_version(text: str | None = None, source: str = "--vllm-ascend-version") -> Version:
    """`text` (a vllm-ascend release such as 0.25.1rc1, with or without a leading v) as a comparable version; None is
    the release ascend-pd pins (defaults.VLLM_ASCEND_RELEASE)."""
    raw = VLLM_ASCEND_RELEASE if text is None else str(text).strip().removeprefix("v")
    try:
        return Version(raw)
    except InvalidVersion:
        raise InputError(f"'{text}' is not a vllm-ascend release", field=source,
                         fix=f"give a release such as {VLLM_ASCEND_RELEASE}") from None


def runs_full_and_piecewise(version: Version) -> bool:
    """Whether vLLM's FULL_AND_PIECEWISE (full graphs of uniform decode batches) runs as asked."""
    return version >= FULL_AND_PIECEWISE_SINCE


def schedules_async_by_default(version: Version) -> bool:
    return version >= ASYNC_SCHEDULING_SINCE
