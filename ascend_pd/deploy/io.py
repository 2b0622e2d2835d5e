"""Load and dump deployment.yaml so that a dump loads back to an equal Deployment."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import ValidationError

from ascend_pd.atomic import write_atomic
from ascend_pd.deploy.schema import Deployment
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster, load_cluster
from ascend_pd.yamlfile import Loc, dump_yaml, load_model, parse_yaml, validate_model

BUNDLE_DEPLOYMENT = "deployment.yaml"  # a rendered bundle's deployment file, beside its launchers


class LoadedDeployment:
    """A parsed deployment with where it came from: the file, the line of each key, and its cluster."""

    def __init__(self, deployment: Deployment, source: str, lines: dict[Loc, int]):
        self.deployment = deployment
        self.source = source
        self.lines = lines

    def cluster(self) -> Cluster:
        """The deployment's cluster, its nodes at the addresses `node_addresses` gives: the one view of where each
        node is that render, the proxy, the connector's config, preflight and the autoscaler all read."""
        return load_cluster(self.cluster_ref()).with_host_ips(self._node_addresses())

    def cluster_ref(self) -> str:
        """The cluster's shipped name, or its file's path (a relative one is relative to the deployment file)."""
        ref = self.deployment.cluster
        path = Path(ref)
        if not path.is_absolute() and path.suffix in (".yaml", ".yml") and self.source:
            path = Path(self.source).parent / path
            if path.exists():
                ref = str(path)
        return ref

    def _node_addresses(self) -> dict[str, str]:
        addresses = self.deployment.node_addresses or {}
        if addresses:
            cluster = load_cluster(self.cluster_ref())
            for name in addresses:
                cluster.require_node(name, file=self.source, field=f"node_addresses.{name}",
                                     line=self.lines.get(("node_addresses", name)))
        return {name: str(address) for name, address in addresses.items()}

    def with_node_addresses(self, addresses: dict[str, str]) -> "LoadedDeployment":
        """This deployment with more node addresses (`--node-ip`), later ones winning; checked like the file's."""
        if not addresses:
            return self
        merged = {**(self.deployment.node_addresses or {}), **addresses}
        try:
            deployment = Deployment.model_validate({**self.deployment.model_dump(), "node_addresses": merged})
        except ValidationError as error:
            bad = error.errors()[0]
            raise InputError(f"{bad['input']!r} is not an IPv4 address", field="--node-ip",
                             fix="write it as --node-ip a3-00=10.0.0.5") from None
        loaded = LoadedDeployment(deployment, self.source, self.lines)
        loaded._node_addresses()  # an unknown node is refused here, not when something first reads the cluster
        return loaded


def load_deployment(path: str | Path) -> LoadedDeployment:
    deployment, lines = load_model(Deployment, path)
    return LoadedDeployment(deployment, str(path), lines)


def parse_deployment(text: str | bytes, source: str = "<string>") -> LoadedDeployment:
    data, lines = parse_yaml(text, source)
    return LoadedDeployment(validate_model(Deployment, data, source, lines), source, lines)


def dump_deployment(deployment: Deployment) -> str:
    data = deployment.model_dump(mode="json", exclude_none=True)
    return dump_yaml(data, default_flow_style=None, width=120)


def revision_of(deployment: Deployment) -> str:
    """A short digest of what the deployment says: the backend table names the deployment it serves by it."""
    return hashlib.sha256(dump_deployment(deployment).encode()).hexdigest()[:12]


def write_deployment(deployment: Deployment, path: str | Path) -> None:
    """Replace the file at once and on disk: the autoscaler rewrites a deployment file that launchers, the proxy and
    operators read while it runs, and a crash must leave the old file or the new one."""
    write_atomic(path, dump_deployment(deployment))
