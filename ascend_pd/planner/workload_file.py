"""Read a workload for the planner or simulator: a YAML file (`workload:` and optional `slo:`, as in
deployment.yaml) or a JSONL trace of {input_tokens, output_tokens}."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.planner.workload import load_trace
from ascend_pd.yamlfile import parse_yaml, read_text, validate_model


class WorkloadFile(BaseModel):
    model_config = ConfigDict(extra="ignore")  # a deployment.yaml carries its workload and SLO the same way

    workload: Workload
    slo: SLO | None = None


def read_workload(path: str | Path, rate: float | None = None) -> tuple[Workload, SLO | None]:
    """The workload (and SLO, if the file has one) in `path`. A trace keeps its own lengths; its mean lengths fill
    the distribution fields so reports can quote them."""
    path = Path(path)
    if path.suffix == ".jsonl":
        trace = load_trace(path)
        workload = Workload(
            input_tokens=LengthDistribution(mean=float(trace.input_tokens.mean())),
            output_tokens=LengthDistribution(mean=float(trace.output_tokens.mean())),
            rate=rate or 1.0, trace=str(path.resolve()))
        return workload, None
    data, lines = parse_yaml(read_text(path), str(path))
    loaded = validate_model(WorkloadFile, data, str(path), lines)
    workload = loaded.workload
    if workload.trace and not Path(workload.trace).is_absolute():
        workload = workload.model_copy(update={"trace": str((path.parent / workload.trace).resolve())})
    return workload, loaded.slo
