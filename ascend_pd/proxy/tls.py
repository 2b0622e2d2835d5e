"""TLS on the proxy's public port: the server context made from a certificate file and its key, or a clear error
naming the flag to fix."""

from __future__ import annotations

import ssl

from ascend_pd.errors import InputError


def server_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    """The context to serve HTTPS with; None (plain HTTP) when neither file is given."""
    if not certfile and not keyfile:
        return None
    if not certfile or not keyfile:
        missing = "--ssl-keyfile" if certfile else "--ssl-certfile"
        raise InputError("TLS needs both a certificate and its private key", field=missing,
                         fix="pass --ssl-certfile CERT.pem and --ssl-keyfile KEY.pem together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(certfile, keyfile)
    except OSError as exc:
        if isinstance(exc, ssl.SSLError):
            raise _unusable(certfile, keyfile, exc) from None
        flag = "--ssl-certfile" if exc.filename == certfile else "--ssl-keyfile"
        raise InputError(f"cannot read it: {exc.strerror or exc}", file=exc.filename or certfile, field=flag,
                         fix="pass a file this user can read") from None
    return context


def _unusable(certfile: str, keyfile: str, exc: ssl.SSLError) -> InputError:
    """Which of the two files OpenSSL refused: the certificate file if it holds no PEM certificate, else the key."""
    try:
        ssl.create_default_context().load_verify_locations(cafile=certfile)
    except ssl.SSLError:
        return InputError(f"not a PEM certificate ({exc.reason or exc})", file=certfile, field="--ssl-certfile",
                          fix="pass the server certificate (chain) in PEM, '-----BEGIN CERTIFICATE-----'")
    return InputError(f"not the private key of the certificate in {certfile} ({exc.reason or exc})", file=keyfile,
                      field="--ssl-keyfile", fix="pass the PEM private key the certificate was issued for, unencrypted")
