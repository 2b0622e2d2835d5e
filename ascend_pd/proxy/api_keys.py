"""Client API keys on the OpenAI endpoints, as vLLM's server checks them: `Authorization: Bearer <key>`, its hash
compared in constant time with the hash of each key (equal-length digests, so the time says nothing of a key's
length or of which key matched). The keys themselves stay in the proxy's settings, out of their repr."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from ascend_pd.errors import InputError
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.wire.server import Request

API_KEY_ENV = "ASCEND_PD_PROXY_API_KEY"  # like vLLM's VLLM_API_KEY
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


def read_key_file(path: str) -> tuple[str, ...]:
    """The keys in `path`, one a line; blank lines and lines starting with '#' are skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the API key file: {exc.strerror or exc}", file=path, field="--api-key-file",
                         fix="pass a readable file with one key a line") from None
    keys = tuple(line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise InputError("the API key file holds no key", file=path, field="--api-key-file",
                         fix="write one key a line")
    return keys
