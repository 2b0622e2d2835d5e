"""The metaserver of vllm-ascend's layerwise connector: D posts its block coordinates here, the waiting request
resumes and dispatches P with them.

A post counts only if it proves it belongs to its request: the proxy hands D a metaserver URL that carries a fresh
token per request as its user-info (http://<token>@proxy:port/v1/metaserver). D's HTTP client (httpx in vllm-ascend,
as requests and aiohttp would) sends user-info as Basic authorization, so the token comes back with D's post and
nothing else has it: a post with the right request id but not the live token changes nothing.

The metaserver is served on the public port, so when that port serves TLS the URL is https whatever the advertised
URL says (D posts exactly to the URL it is given: plain HTTP would reach no server), and D must trust the
proxy's certificate."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import secrets
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ascend_pd.proxy.ids import REQUEST_ID

# D's kv_transfer_params: its block ids for every KV cache group and a dozen scalars. 1 MiB holds some 150,000 block
# ids (a 2.4M-token prompt at block size 16); a larger post is no D's.
MAX_POST_BYTES = 1 << 20
TOKEN_BYTES = 24  # 192 bits; token_urlsafe's alphabet needs no escaping in a URL's user-info


class ForgedPost(Exception):
    """A post names a waiting request but does not carry its token."""


def url_with_token(metaserver_url: str, token: str, tls: bool = False) -> str:
    """The URL D posts to: the metaserver's, with `token` as its user-info, and https when `tls` (the port serves
    it)."""
    parts = urlsplit(metaserver_url)
    scheme = "https" if tls else parts.scheme
    return urlunsplit(parts._replace(scheme=scheme, netloc=f"{token}@{parts.netloc.rpartition('@')[2]}"))


def posted_token(authorization: str | None) -> str | None:
    """The token a post carries: the user name of its Basic authorization; None without one."""
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, _ = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user or None


class Metaserver:
    def __init__(self):
        self._waiting: dict[str, tuple[str, asyncio.Future]] = {}

    def expect(self, request_id: str) -> tuple[str, asyncio.Future]:
        """The token D's post must carry for this request, and the future its kv_transfer_params will resolve."""
        token = secrets.token_urlsafe(TOKEN_BYTES)
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = (token, future)
        return token, future

    def forget(self, request_id: str) -> None:
        _, future = self._waiting.pop(request_id, (None, None))
        if future is not None and not future.done():
            future.cancel()

    def deliver(self, payload: dict[str, Any], token: str) -> bool:
        """Hand D's kv_transfer_params to the request they belong to; False if no request is waiting for them,
        ForgedPost if one is but `token` is not its own."""
        match = REQUEST_ID.search(str(payload.get("request_id", "")))
        expected, future = self._waiting.get(match.group(), (None, None)) if match else (None, None)
        if future is None or future.done():
            return False
        if not hmac.compare_digest(token.encode(), expected.encode()):
            raise ForgedPost
        future.set_result(payload)
        return True

    def __len__(self) -> int:
        return len(self._waiting)
