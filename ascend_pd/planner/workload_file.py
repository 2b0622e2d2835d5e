"""The workload and SLO a plan or simulation runs with: read from a YAML file (`workload:` and optional `slo:`, as in
deployment.yaml) or a JSONL trace of {input_tokens, output_tokens}, then adjusted field by field."""

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


def build_workload(base: Workload, base_slo: SLO, workload_file: str | Path | None = None, *,
                   input_mean: float | None = None, input_p99: float | None = None, input_dist: str | None = None,
                   output_mean: float | None = None, output_p99: float | None = None,
                   output_dist: str | None = None, rate: float | None = None, ttft_ms: float | None = None,
                   tpot_ms: float | None = None, attainment: float | None = None) -> tuple[Workload, SLO]:
    """Start from `base` (and `base_slo`), take the file's workload if given, then apply each value given.

    A p99 given without a std clears the base's std, so the new p99 sets the spread rather than an older std."""
    workload, slo = base, base_slo
    if workload_file:
        workload, file_slo = read_workload(workload_file, rate)
        slo = file_slo or slo
    workload = workload.model_copy(update={
        "input_tokens": _adjusted(workload.input_tokens, input_mean, input_p99, input_dist),
        "output_tokens": _adjusted(workload.output_tokens, output_mean, output_p99, output_dist),
        **({"rate": rate} if rate else {})})
    slo = slo.model_copy(update={k: v for k, v in (("ttft_ms", ttft_ms), ("tpot_ms", tpot_ms),
                                                   ("attainment", attainment)) if v is not None})
    return workload, slo


def _adjusted(dist: LengthDistribution, mean: float | None, p99: float | None,
              shape: str | None) -> LengthDistribution:
    if mean is None and p99 is None and shape is None:
        return dist
    update = {k: v for k, v in (("mean", mean), ("p99", p99), ("distribution", shape)) if v is not None}
    if p99 is not None:
        update["std"] = None
    return dist.model_copy(update=update)
