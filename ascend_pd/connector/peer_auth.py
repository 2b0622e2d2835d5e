"""Side-channel authentication: ZeroMQ CURVE keys derived from the deployment's KV secret, so only engines of the same
deployment can complete a connection to each other's side channel, before any byte of a message is read.

Every engine derives the same two key pairs: a CURVE secret key is SHA-256(label || KV secret), its public key
follows from it. A side-channel server is a CURVE server with the server secret key; a client names the server
public key and holds the client key pair. CurveZMQ never sends the server public key: a client must know it to
write a HELLO the server can open, so a peer without the KV secret fails at its first handshake command. No ZAP
handler checks the client key on top: it comes from the same secret, so the check would ask for nothing more, at
the cost of an authenticator thread per process and a round trip per connection. The server public key is what
keeps strangers out, so the derived public keys are as secret as the KV secret: never log or write them.

Past the handshake every message is encrypted and authenticated by CURVE with per-connection keys and nonces
that differ by direction and never repeat: a reply cannot be sent back as a request, nor a captured message
replayed.
"""

from __future__ import annotations

import hashlib

import zmq
from zmq.utils import z85

from ascend_pd.deploy.secrets import KV_SECRET, KV_SECRET_ENV, secret_from_env
from ascend_pd.errors import InputError

_SERVER = b"ascend-pd side channel server v1\n"
_CLIENT = b"ascend-pd side channel client v1\n"
_FIX = (f"export {KV_SECRET_ENV}=<bundle>/{KV_SECRET} before starting the engine (ascend-pd render writes the file "
        "and its launch scripts export the variable); every engine of a deployment needs the same file")


class PeerKey:
    """The deployment's KV secret as the side channel uses it: the CURVE keys every engine of it derives."""

    def __init__(self, secret: str):
        if not zmq.has("curve"):  # without CURVE the side channel would take any peer's bytes
            raise InputError(f"this pyzmq ({zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}) has no CURVE "
                             "security: the connector's side channel would be open to any host",
                             file="environment", field="pyzmq",
                             fix="pip install --force-reinstall pyzmq (its wheels bundle libzmq with CURVE), or "
                                 "build libzmq with libsodium or its bundled tweetnacl")
        self._server_public, self._server_secret = _key_pair(_SERVER, secret)
        self._client_public, self._client_secret = _key_pair(_CLIENT, secret)

    @classmethod
    def from_env(cls) -> PeerKey:
        """The key from the file KV_SECRET_ENV names; a clear InputError when it is unset or the file is unfit."""
        secret = secret_from_env(KV_SECRET_ENV, field=KV_SECRET_ENV, fix=_FIX)
        if secret is None:
            raise InputError(f"{KV_SECRET_ENV} is not set: the connector's side channel only talks to peers that "
                             "hold the deployment's KV secret", file="environment", field=KV_SECRET_ENV, fix=_FIX)
        return cls(secret)

    def serve_on(self, socket: zmq.Socket) -> None:
        """Make `socket` (before it binds) a CURVE server only this deployment's engines can connect to."""
        socket.curve_server = True
        socket.curve_secretkey = self._server_secret

    def connect_with(self, socket: zmq.Socket) -> None:
        """Make `socket` (before it connects) a CURVE client of this deployment's servers."""
        socket.curve_serverkey = self._server_public
        socket.curve_publickey = self._client_public
        socket.curve_secretkey = self._client_secret


def _key_pair(label: bytes, secret: str) -> tuple[bytes, bytes]:
    """(public, secret) CURVE keys, Z85-encoded; any 32 bytes are a valid Curve25519 secret key."""
    secret_key = z85.encode(hashlib.sha256(label + secret.encode()).digest())
    return zmq.curve_public(secret_key), secret_key
