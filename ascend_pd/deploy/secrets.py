"""The deployment's secrets: where a bundle keeps them, how a process finds them, and how they are read.

Two secrets, each its own file so that a process holds only what it needs:
- the KV secret, shared by every engine's connector, which authenticates side-channel peers to each other (the
  proxy does not hold it: its layerwise metaserver checks D with a token of each request's own);
- the admin token, shared by the proxy's admin API and the autoscaler that drives it.
Render generates both once and keeps them on re-render (a running engine and a new one must agree). A process finds a
secret through an environment variable naming the file; the secret itself never travels on a command line.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from ascend_pd.atomic import write_atomic
from ascend_pd.errors import InputError

SECRETS_DIR = "secrets"
KV_SECRET = f"{SECRETS_DIR}/kv.key"  # relative to the bundle
ADMIN_TOKEN = f"{SECRETS_DIR}/admin.token"

KV_SECRET_ENV = "ASCEND_PD_KV_SECRET_FILE"
ADMIN_TOKEN_ENV = "ASCEND_PD_PROXY_ADMIN_TOKEN"  # the token itself, for a shell or a k8s secretKeyRef
ADMIN_TOKEN_FILE_ENV = "ASCEND_PD_PROXY_ADMIN_TOKEN_FILE"
API_KEY_ENV = "ASCEND_PD_PROXY_API_KEY"  # the proxy's client keys, like vLLM's VLLM_API_KEY

K8S_SECRET_MOUNT = "/etc/ascend-pd/secrets"  # where rendered pods mount the deployment's Secret
K8S_SECRET_MODE = 0o400

MIN_SECRET_CHARS = 32  # 128 bits in hex


def new_secret() -> str:
    """A fresh secret: 256 random bits from the OS, as hex (safe in a file, an env var and a k8s Secret)."""
    return secrets.token_hex(32)


def write_new_secret(path: str | Path) -> Path:
    """A fresh secret in `path`, readable by its owner only from its first byte; the path."""
    write_atomic(path, new_secret() + "\n", mode=0o600)
    return Path(path)


def read_secret(path: str | Path, *, field: str, fix: str) -> str:
    """The secret in `path`, refused with a clear error if it is missing, too short or readable by others."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise InputError(f"cannot read the secret file: {error.strerror}", file=str(path), field=field,
                         fix=fix) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InputError(f"the secret file is open to other users (mode {stat.S_IMODE(mode):o})", file=str(path),
                         field=field, fix=f"chmod 600 {path}")
    if len(text) < MIN_SECRET_CHARS:
        raise InputError(f"the secret is {len(text)} characters; at least {MIN_SECRET_CHARS} are needed",
                         file=str(path), field=field, fix="write a longer one, e.g. "
                                                          "python -c 'import secrets; print(secrets.token_hex(32))'")
    return text


def secret_from_env(variable: str, *, field: str, fix: str) -> str | None:
    """The secret in the file that environment variable `variable` names; None when the variable is unset."""
    path = os.environ.get(variable)
    return read_secret(path, field=field, fix=fix) if path else None


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
