"""Identifiers the proxy mints per request: X-Request-Id and push transfer ids.

Each is 128 bits from the OS's CSPRNG (`secrets`), drawn per id: a client sees its own request ids and must not be
able to guess another request's, nor a transfer's (a guessed id would let it steer a handoff). One getrandom() per
request costs about a microsecond. Fresh draws need no care across forked proxy workers either."""

from __future__ import annotations

import re
import secrets

# vLLM decorates the X-Request-Id it was given (cmpl-<id>-0, chatcmpl-<id>, and a suffix in newer versions), so the
# metaserver finds the proxy's id inside whatever D reports rather than rebuilding vLLM's format.
REQUEST_ID = re.compile(r"pd-[0-9a-f]{32}")


def new_request_id() -> str:
    return f"pd-{secrets.token_hex(16)}"


def new_transfer_id() -> str:
    """Fresh per attempt: a retried pair never reuses a transfer."""
    return secrets.token_hex(16)
