"""Identifiers the proxy mints per request: X-Request-Id and push transfer ids.

A random 64-bit prefix drawn once per process plus a counter: unique across proxy replicas and restarts like a
uuid4, without a getrandom() call and a UUID object per request."""

from __future__ import annotations

import itertools
import os
import re

# vLLM decorates the X-Request-Id it was given (cmpl-<id>-0, chatcmpl-<id>, and a suffix in newer versions), so the
# metaserver finds the proxy's id inside whatever D reports rather than rebuilding vLLM's format.
REQUEST_ID = re.compile(r"pd-[0-9a-f]{32}")


class IdSource:
    def __init__(self, prefix: int | None = None):
        self._prefix = f"{prefix if prefix is not None else int.from_bytes(os.urandom(8), 'big'):016x}"
        self._counter = itertools.count(1)

    def hex32(self) -> str:
        """32 hex digits never returned before by any IdSource (with overwhelming probability)."""
        return f"{self._prefix}{next(self._counter):016x}"

    def request_id(self) -> str:
        return f"pd-{self.hex32()}"


_IDS = IdSource()


def _fresh_ids_after_fork() -> None:
    """A forked proxy worker starts from a prefix of its own: with its parent's, two workers would mint the same
    ids, and a metaserver post or a push transfer would reach the other worker's request."""
    global _IDS
    _IDS = IdSource()


os.register_at_fork(after_in_child=_fresh_ids_after_fork)


def new_request_id() -> str:
    return _IDS.request_id()


def new_transfer_id() -> str:
    """Fresh per attempt: a retried pair never reuses a transfer."""
    return _IDS.hex32()
