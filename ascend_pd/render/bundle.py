"""Render a deployment into files: validate, lay out the processes, print the requested targets, write them out."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ascend_pd.atomic import write_atomic
from ascend_pd.deploy import (Deployment, Diagnostic, LoadedDeployment, dump_deployment, has_errors, parse_deployment,
                              validate)
from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT
from ascend_pd.deploy.file_schemas import schema_file_name, schema_text, with_modeline_beside
from ascend_pd.deploy.rules.names import INTERFACE, INTERFACE_RULE, unsafe_character
from ascend_pd.errors import InputError
from ascend_pd.hardware import shipped_clusters
from ascend_pd.render.bash import bash_files, readme
from ascend_pd.render.bundle_secrets import write_secrets
from ascend_pd.render.image import default_image
from ascend_pd.render.k8s import k8s_objects
from ascend_pd.render.processes import plan_processes
from ascend_pd.render.ranktable import rank_table
from ascend_pd.render.revisions import keep_revision
from ascend_pd.render.vllm_ascend_checks import Refusal, plan_refusals
from ascend_pd.yamlfile import dump_yaml

TARGETS = ("bash", "k8s", "all")


@dataclass(frozen=True)
class RenderOptions:
    target: str = "all"
    interface: str | None = None  # overrides every node's interface from the cluster config
    # container image with ascend-pd and vLLM (vllm-ascend on NPUs) for the k8s target; None: ascend-pd's image for
    # the vllm-ascend release the deployment pins
    image: str | None = None

    def __post_init__(self) -> None:
        # the interface goes into comments and exports of every launcher, as the cluster file's does (APD305)
        bad = self.interface is not None and unsafe_character(self.interface, INTERFACE)
        if bad:
            raise InputError(f"interface {self.interface!r} has {bad}, which is not safe in a launch script",
                             field="--interface",
                             fix=f"give the NIC's name: {INTERFACE_RULE}")

    def targets(self) -> set[str]:
        return {"bash", "k8s"} if self.target == "all" else {self.target}


@dataclass(frozen=True)
class RenderResult:
    diagnostics: list[Diagnostic]
    files: dict[str, str]  # relative path -> text; empty when validation found errors. No secret is ever among them
    k8s_deployment: str | None = None  # metadata.name when the k8s target was rendered: write_bundle writes its Secret

    @property
    def refused(self) -> bool:
        return has_errors(self.diagnostics)


# The bundle's own copy of a cluster given as a file, so the bundle runs wherever it is copied.
BUNDLE_CLUSTER = "cluster.yaml"


def _bundled(loaded: LoadedDeployment) -> tuple[Deployment, str | None]:
    """The deployment the bundle carries, and the text of its cluster file when the cluster is a file rather than a
    shipped name: the bundle's deployment.yaml then names the copy beside it."""
    ref = loaded.cluster_ref()
    if ref in shipped_clusters():
        return loaded.deployment, None
    text = Path(ref).read_text(encoding="utf-8")
    return loaded.deployment.model_copy(update={"cluster": BUNDLE_CLUSTER}), text


def _with_top_level(text: str, key: str, block: str) -> str:
    """`text` with its top-level `key:` section replaced by `block` (or `block` appended), other lines kept."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(rf"{key}\s*:", line)), None)
    if start is None:
        return text + ("" if text.endswith("\n") else "\n") + block
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t"):
        end += 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def _deployment_text(loaded: LoadedDeployment, deployment: Deployment) -> str:
    """The file as the user wrote it, comments kept, with the sections the bundle changed (the cluster's copy, the
    node addresses --node-ip gave) rewritten; dumped whole when the text cannot say it (a rollout's changes)."""
    source = Path(loaded.source)
    if source.is_file():
        text = source.read_text(encoding="utf-8")
        written = parse_deployment(text, str(source)).deployment
        for key in ("cluster", "node_addresses"):
            value = getattr(deployment, key)
            if getattr(written, key) != value:
                text = _with_top_level(text, key, dump_yaml({key: deployment.model_dump(mode="json")[key]}))
        if parse_deployment(text, str(source)).deployment == deployment:
            return text
    return dump_deployment(deployment)


def _yaml_documents(objects: list[dict]) -> str:
    return "---\n".join(dump_yaml(o, width=120) for o in objects)


def _upstream_refusal(refusal: Refusal) -> Diagnostic:
    return Diagnostic(code="APD499", severity="error", path=refusal.engine, message=refusal.describe(),
                      hint="change the instance's shape or connector so vllm-ascend starts it; please report the "
                           "deployment, since validation should have refused it with a rule of its own")


def render_bundle(loaded: LoadedDeployment, options: RenderOptions = RenderOptions()) -> RenderResult:
    """Everything the chosen targets need, or no files at all when the deployment does not validate."""
    diagnostics = validate(loaded)
    if has_errors(diagnostics):
        return RenderResult(diagnostics, {})
    plan = plan_processes(loaded, options.interface)
    refused = [_upstream_refusal(r) for r in plan_refusals(plan)]
    if refused:  # validation should have said so first: this keeps a rule's gap from reaching a cluster
        return RenderResult(diagnostics + refused, {})
    targets = options.targets()
    bundled, cluster_text = _bundled(loaded)
    deployment_text = _deployment_text(loaded, bundled)
    # the bundle carries the schemas its files' first lines name, so an editor checks them wherever it is copied
    deployment_text = with_modeline_beside("deployment", deployment_text)
    files = {BUNDLE_DEPLOYMENT: deployment_text, "README.md": readme(plan, targets),
             schema_file_name("deployment"): schema_text("deployment")}
    if cluster_text is not None:
        files[BUNDLE_CLUSTER] = with_modeline_beside("cluster", cluster_text)
        files[schema_file_name("cluster")] = schema_text("cluster")
    if "bash" in targets:
        files.update(bash_files(plan))
        if plan.platform != "cpu":
            for instance in plan.deployment.instances:
                table = rank_table(plan.cluster, instance)
                files[f"ranktables/{instance.name}.json"] = json.dumps(table, indent=2) + "\n"
    k8s_deployment = None
    if "k8s" in targets:
        image = options.image or default_image(plan.deployment.vllm_ascend_version)
        for name, objects in k8s_objects(plan, deployment_text, image, cluster_text).items():
            files[f"k8s/{name}"] = _yaml_documents(objects)
        k8s_deployment = plan.deployment.metadata.name
    return RenderResult(diagnostics, dict(sorted(files.items())), k8s_deployment)


def write_bundle(files: dict[str, str], out: str | Path, k8s_deployment: str | None = None) -> list[Path]:
    """Write the files under `out`, each replaced whole (a process starting meanwhile reads the old or the new), shell
    scripts executable, after keeping the bundle they replace as a revision (`ascend-pd rollback` puts it back); then
    the bundle's secrets, kept when `out` has them, and with `k8s_deployment` (a RenderResult's) the Secret
    manifest."""
    keep_revision(Path(out), "render", files)
    written = []
    for relative, text in files.items():
        path = Path(out) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text, mode=0o755 if path.suffix == ".sh" else None)
        written.append(path)
    return written + write_secrets(out, k8s_deployment)
