"""Side-channel authentication: every message and reply is sealed with an HMAC-SHA256 keyed by the deployment's KV
secret, so only engines of the same deployment can ask each other for metadata, free blocks or steer a push.

Wire format of one side-channel frame: 32-byte MAC || msgpack payload, where
MAC = HMAC-SHA256(secret, direction label || payload). The two labels differ, so a reply (an AgentMetadata, an Ack)
can never be passed off as a request, nor a request as a reply.
"""

from __future__ import annotations

import hashlib
import hmac

from ascend_pd.deploy.secrets import KV_SECRET, KV_SECRET_ENV, secret_from_env
from ascend_pd.errors import InputError

MAC_BYTES = hashlib.sha256().digest_size
_REQUEST = b"ascend-pd side channel request v1\n"
_REPLY = b"ascend-pd side channel reply v1\n"
_FIX = (f"export {KV_SECRET_ENV}=<bundle>/{KV_SECRET} before starting the engine (ascend-pd render writes the file "
        "and its launch scripts export the variable); every engine of a deployment needs the same file")


class PeerKey:
    """The deployment's KV secret as the side channel uses it."""

    def __init__(self, secret: str):
        self._key = secret.encode()

    @classmethod
    def from_env(cls) -> PeerKey:
        """The key from the file KV_SECRET_ENV names; a clear InputError when it is unset or the file is unfit."""
        secret = secret_from_env(KV_SECRET_ENV, field=KV_SECRET_ENV, fix=_FIX)
        if secret is None:
            raise InputError(f"{KV_SECRET_ENV} is not set: the connector's side channel only talks to peers that "
                             "hold the deployment's KV secret", file="environment", field=KV_SECRET_ENV, fix=_FIX)
        return cls(secret)

    def _mac(self, label: bytes, payload: bytes) -> bytes:
        return hmac.new(self._key, label + payload, hashlib.sha256).digest()

    def seal_request(self, payload: bytes) -> bytes:
        return self._mac(_REQUEST, payload) + payload

    def seal_reply(self, payload: bytes) -> bytes:
        return self._mac(_REPLY, payload) + payload

    def open_request(self, frame: bytes) -> bytes | None:
        """The payload of a request sealed with this key; None for anything else."""
        return self._open(_REQUEST, frame)

    def open_reply(self, frame: bytes) -> bytes | None:
        return self._open(_REPLY, frame)

    def _open(self, label: bytes, frame: bytes) -> bytes | None:
        mac, payload = frame[:MAC_BYTES], frame[MAC_BYTES:]
        if len(mac) != MAC_BYTES or not hmac.compare_digest(mac, self._mac(label, payload)):
            return None
        return payload
