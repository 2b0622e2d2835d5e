"""Render a deployment into files: validate, lay out the processes, print the requested targets, write them out."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ascend_pd.deploy import Diagnostic, LoadedDeployment, dump_deployment, has_errors, parse_deployment, validate
from ascend_pd.render.bash import bash_files, readme
from ascend_pd.render.k8s import k8s_objects
from ascend_pd.render.processes import plan_processes
from ascend_pd.render.ranktable import rank_table
from ascend_pd.render.vllm_ascend_checks import Refusal, plan_refusals
from ascend_pd.yamlfile import dump_yaml

TARGETS = ("bash", "k8s", "all")
DEFAULT_IMAGE = "ascend-pd:latest"


@dataclass(frozen=True)
class RenderOptions:
    target: str = "all"
    interface: str | None = None  # overrides every node's interface from the cluster config
    node_ips: dict[str, str] = field(default_factory=dict)  # node name -> host IP, overriding the cluster config
    image: str = DEFAULT_IMAGE  # container image with ascend-pd and vLLM (vllm-ascend on NPUs) for the k8s target

    def targets(self) -> set[str]:
        return {"bash", "k8s"} if self.target == "all" else {self.target}


@dataclass(frozen=True)
class RenderResult:
    diagnostics: list[Diagnostic]
    files: dict[str, str]  # relative path -> text; empty when validation found errors

    @property
    def refused(self) -> bool:
        return has_errors(self.diagnostics)


def _deployment_text(loaded: LoadedDeployment) -> str:
    """The file as the user wrote it (comments kept), unless the deployment no longer is what the file says (a
    rollout renders the changed deployment before it writes the file)."""
    source = Path(loaded.source)
    if source.is_file():
        text = source.read_text(encoding="utf-8")
        if parse_deployment(text, str(source)).deployment == loaded.deployment:
            return text
    return dump_deployment(loaded.deployment)


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
    plan = plan_processes(loaded, options.interface, options.node_ips)
    refused = [_upstream_refusal(r) for r in plan_refusals(plan)]
    if refused:  # validation should have said so first: this keeps a rule's gap from reaching a cluster
        return RenderResult(diagnostics + refused, {})
    targets = options.targets()
    deployment_text = _deployment_text(loaded)
    files = {"deployment.yaml": deployment_text, "README.md": readme(plan, targets)}
    if "bash" in targets:
        files.update(bash_files(plan))
        if plan.platform != "cpu":
            for instance in plan.deployment.instances:
                table = rank_table(plan.cluster, instance, options.node_ips)
                files[f"ranktables/{instance.name}.json"] = json.dumps(table, indent=2) + "\n"
    if "k8s" in targets:
        for name, objects in k8s_objects(plan, deployment_text, options.image).items():
            files[f"k8s/{name}"] = _yaml_documents(objects)
    return RenderResult(diagnostics, dict(sorted(files.items())))


def write_bundle(files: dict[str, str], out: str | Path) -> list[Path]:
    """Write the files under `out`; shell scripts become executable."""
    written = []
    for relative, text in files.items():
        path = Path(out) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if path.suffix == ".sh":
            os.chmod(path, 0o755)
        written.append(path)
    return written
