"""The deployment's secrets in a rendered bundle: made once, kept on every re-render (a running engine and a new one
must agree), written readable by the owner only, and for Kubernetes also as the Secret the pods mount. They never
enter RenderResult.files, so nothing that prints, diffs or logs rendered files can show them."""

from __future__ import annotations

from pathlib import Path

from ascend_pd.atomic import write_atomic
from ascend_pd.deploy.secrets import ADMIN_TOKEN, KV_SECRET, SECRETS_DIR, new_secret, read_secret
from ascend_pd.render.k8s import secret_object
from ascend_pd.yamlfile import dump_yaml

SECRET_MANIFEST = "k8s/secrets.yaml"  # relative to the bundle, beside the manifests that mount it
PRIVATE = 0o600
PRIVATE_DIR = 0o700
GITIGNORE = f"{SECRETS_DIR}/.gitignore"
# Everything under secrets/ stays out of version control, even when the bundle itself is committed.
GITIGNORE_TEXT = "# Written by `ascend-pd render`: the deployment's secrets, never to be committed.\n*\n"


def _kept_or_new(path: Path) -> tuple[str, bool]:
    """The secret already in `path` (running processes hold it), or a new one; and whether it is new."""
    if not path.exists():
        return new_secret(), True
    return read_secret(path, field=f"{SECRETS_DIR}/{path.name}",
                       fix="fix the file's mode, or delete it to have render make a new one (then restart every "
                           "process of the deployment)"), False


def write_secrets(bundle: str | Path, k8s_deployment: str | None) -> list[Path]:
    """Make the bundle's secrets where missing and keep the ones it has; with `k8s_deployment` (metadata.name, for
    the k8s target) also write the Secret manifest that carries them. Secret files are 0600 from their first byte.
    The files written."""
    bundle = Path(bundle)
    (bundle / SECRETS_DIR).mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    (bundle / SECRETS_DIR).chmod(PRIVATE_DIR)  # one made by hand, or copied, may let others list it
    written = []
    values = {}
    for relative in (KV_SECRET, ADMIN_TOKEN):
        values[relative], new = _kept_or_new(bundle / relative)
        if new:
            write_atomic(bundle / relative, values[relative] + "\n", mode=PRIVATE)
            written.append(bundle / relative)
    if not (bundle / GITIGNORE).exists():
        write_atomic(bundle / GITIGNORE, GITIGNORE_TEXT)
        written.append(bundle / GITIGNORE)
    if k8s_deployment is not None:
        manifest = bundle / SECRET_MANIFEST
        manifest.parent.mkdir(parents=True, exist_ok=True)
        secret = secret_object(k8s_deployment, values[KV_SECRET], values[ADMIN_TOKEN])
        write_atomic(manifest, dump_yaml(secret, width=120), mode=PRIVATE)
        written.append(manifest)
    return written
