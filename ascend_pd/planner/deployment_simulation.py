"""Simulate a deployment.yaml as written: refuse one with validation errors, take its workload and SLO (or the ones
given), build its cost model, and add the per-device figures a report quotes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascend_pd.defaults import MTP_ACCEPTANCE
from ascend_pd.deploy import load_deployment, validate
from ascend_pd.deploy.schema import SLO, Deployment, Workload
from ascend_pd.errors import InputError
from ascend_pd.models import get_model
from ascend_pd.perf.on_chip import whole_cluster
from ascend_pd.planner.workload import DEFAULT_SLO, DEFAULT_WORKLOAD
from ascend_pd.planner.workload_file import build_workload


@dataclass(frozen=True)
class DeploymentSimulation:
    deployment: Deployment
    workload: Workload
    slo: SLO
    result: dict  # the simulator's figures, plus devices, goodput_per_device and slo


def simulate_deployment_file(path: str | Path, workload_file: str | Path | None = None, *, duration: float = 120.0,
                             warmup: float | None = None, mtp_acceptance: float = MTP_ACCEPTANCE, seed: int = 0,
                             calibration: str | None = None, vllm_ascend_version: str | None = None,
                             **workload_values) -> DeploymentSimulation:
    """Simulate the deployment in `path` for `duration` seconds of arrivals, leaving out the first `warmup`
    seconds (a quarter of `duration` when None). `workload_values` are build_workload's keyword arguments."""
    from ascend_pd.planner.simulator import simulate

    loaded = load_deployment(path)
    errors = [d for d in validate(loaded) if d.severity == "error"]
    if errors:
        first = errors[0]
        raise InputError(f"{first.message} ({first.code}; {len(errors)} error(s) in all)", file=str(path),
                         field=first.path, line=first.line, fix=f"{first.hint}; see `ascend-pd validate`")
    deployment = loaded.deployment
    if deployment.workload is None and not (workload_file or workload_values.get("rate")):
        raise InputError("the deployment has no workload", file=str(path), field="workload",
                         fix="add a workload section, or pass --workload FILE or --rate with length flags")
    workload, slo = build_workload(deployment.workload or DEFAULT_WORKLOAD, deployment.slo or DEFAULT_SLO,
                                   workload_file, **workload_values)
    cluster = loaded.cluster()
    try:
        model = get_model(deployment.model.name)
    except InputError as exc:
        raise InputError(exc.message, file=str(path), field="model.name", fix=exc.fix) from None
    # Each instance is priced on its own nodes' chip (modes.instance_cost); outside them the simulator reads only
    # the links and the profile's request overhead, the same for every chip in the shipped profiles.
    cost = whole_cluster(model, cluster, deployment.model.quantization, deployment.model.kv_cache_dtype, calibration,
                         vllm_ascend_version or deployment.vllm_ascend_version)
    result = simulate(deployment, cost, workload, slo, duration, duration / 4 if warmup is None else warmup, seed,
                      mtp_acceptance, base_dir=Path(path).parent)
    result["devices"] = sum(inst.device_count for inst in deployment.instances)
    result["goodput_per_device"] = result["goodput_rps"] / result["devices"]
    result["slo"] = slo.model_dump(mode="json")
    return DeploymentSimulation(deployment, workload, slo, result)
