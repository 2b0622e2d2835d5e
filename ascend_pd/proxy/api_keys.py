"""Client API keys on the OpenAI endpoints, as vLLM's server checks them: `Authorization: Bearer <key>`, its hash
compared in constant time with the hash of each key (equal-length digests, so the time says nothing of a key's
length or of which key matched). The keys themselves stay in the proxy's settings, out of their repr."""

from __future__ import annotations

import hashlib
import hmac

# kept with the deployment's other secrets, where `ascend-pd check` reads them without the proxy's libraries
from ascend_pd.deploy.secrets import API_KEY_ENV, read_key_file  # noqa: F401
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.wire.server import Request

GUARDED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/models"})


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """The keys a client may present; empty: every client is let in."""

    def __init__(self, keys: tuple[str, ...] = ()):
        self._digests = tuple(_digest(key) for key in keys)

    def __bool__(self) -> bool:
        return bool(self._digests)

    def check(self, request: Request) -> None:
        """ClientError 401 unless the request to a guarded path carries one of the keys."""
        if not self._digests or request.path not in GUARDED_PATHS:
            return
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        presented = _digest(key.strip()) if scheme.lower() == "bearer" else b""
        matched = False
        for digest in self._digests:  # every key compared: the time taken says nothing of which one matched
            matched |= hmac.compare_digest(presented, digest)
        if not matched:
            raise ClientError(401, "a valid API key is needed: 'Authorization: Bearer <key>'", "invalid_api_key")
