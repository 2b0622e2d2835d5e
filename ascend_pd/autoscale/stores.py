"""Where the proxy replicas of a deployment find the autoscaler's backend table when they start again, and where
the replicas listen."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from ascend_pd.atomic import write_atomic
from ascend_pd.autoscale.proxy_admin import StepFailed
from ascend_pd.autoscale.settings import RolloutTimeouts
from ascend_pd.deploy import LoadedDeployment
from ascend_pd.deploy.layout import proxy_urls
from ascend_pd.proxy.backend_table import BackendTable, encode_table, read_table, write_table
from ascend_pd.render.bash import BACKEND_TABLE_FILE
from ascend_pd.render.k8s import TABLE_MANIFEST, backend_table_map

class TableStore:
    """Where the replicas find the table when they start again: the file beside them (bash; give every replica's
    node the same path, on a shared file system or through the launcher's copy command)."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> BackendTable | None:
        return read_table(self.path)

    def write(self, table: BackendTable) -> None:
        write_table(self.path, table)


class ConfigMapStore(TableStore):
    """Kubernetes: the table also goes into the ConfigMap the proxy pods mount (k8s/backends.yaml), applied with
    kubectl; the kubelet refreshes the mounted file, and the pushed table reaches the replicas before that."""

    def __init__(self, path: Path, manifest: Path, deployment_name: str, kubectl: str, timeout: float):
        super().__init__(path)
        self.manifest, self.deployment_name = manifest, deployment_name
        self.kubectl, self.timeout = kubectl, timeout

    def write(self, table: BackendTable) -> None:
        super().write(table)
        config_map = backend_table_map(self.deployment_name, encode_table(table).decode())
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.manifest, json.dumps(config_map, indent=1) + "\n")  # `kubectl apply -f k8s/` reads it
        argv = [*shlex.split(self.kubectl), "apply", "-f", str(self.manifest)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except (subprocess.TimeoutExpired, OSError) as exc:
            raise StepFailed(f"`{shlex.join(argv)}`: {exc}") from None
        if done.returncode:
            raise StepFailed(f"`{shlex.join(argv)}` exited {done.returncode}: {(done.stderr or done.stdout)[-300:]}")



def replica_urls(loaded: LoadedDeployment) -> list[str]:
    """The base URL of every proxy replica the deployment names: proxy.node's, then each of proxy.extra_nodes'."""
    return [url for _, url in proxy_urls(loaded)]


def table_store(loaded: LoadedDeployment, bundle: Path, target: str, kubectl: str) -> TableStore:
    """bash: backends.json in the bundle. k8s: that file and the backends ConfigMap render wrote
    (k8s/backends.yaml), applied with `kubectl`."""
    path = bundle / BACKEND_TABLE_FILE
    if target != "k8s":
        return TableStore(path)
    return ConfigMapStore(path, bundle / "k8s" / TABLE_MANIFEST, loaded.deployment.metadata.name, kubectl,
                          RolloutTimeouts.command)
