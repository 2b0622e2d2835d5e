"""Load and dump deployment.yaml so that a dump loads back to an equal Deployment."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ascend_pd.deploy.schema import Deployment
from ascend_pd.hardware import Cluster, load_cluster
from ascend_pd.yamlfile import Loc, dump_yaml, load_model, parse_yaml, validate_model


class LoadedDeployment:
    """A parsed deployment with where it came from: the file, the line of each key, and its cluster."""

    def __init__(self, deployment: Deployment, source: str, lines: dict[Loc, int]):
        self.deployment = deployment
        self.source = source
        self.lines = lines

    def cluster(self) -> Cluster:
        ref = self.deployment.cluster
        path = Path(ref)
        if not path.is_absolute() and path.suffix in (".yaml", ".yml") and self.source:
            path = Path(self.source).parent / path  # a relative cluster path is relative to the deployment file
            if path.exists():
                ref = str(path)
        return load_cluster(ref)


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
    Path(path).write_text(dump_deployment(deployment), encoding="utf-8")
