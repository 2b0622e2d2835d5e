"""`ascend-pd calibrate`: fit a calibration to `vllm bench serve --save-result` files measured on a deployment.

Each result file becomes up to two fitting rows:
- decode TPOT: the decode ranks held `output_throughput x mean_tpot / decode DP ranks` sequences on average
  (Little's law) of mean length prompt + output / 2;
- TTFT: with `request_throughput x mean_ttft / prefill DP ranks` prompts in prefill at once (Little's law again),
  each of the mean prompt length, then, on a PD deployment, the KV transfer the connector mode leaves exposed and
  decode's first step. Queueing before a free rank is in the measured figure, so TTFT rows are best measured at low
  concurrency.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

from ascend_pd.defaults import MTP_ACCEPTANCE
from ascend_pd.deploy import LoadedDeployment, load_deployment
from ascend_pd.deploy.engine_flags import execution_mode
from ascend_pd.deploy.schema import Instance
from ascend_pd.deploy.vllm_flags import draft_config
from ascend_pd.errors import InputError
from ascend_pd.hardware.platform import platform_of
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import DEFAULT_PROFILE, load_calibration, shipped_profiles
from ascend_pd.perf.fitting import BOUNDS, FitResult, Row, fit
from ascend_pd.perf.on_chip import deployment_group
from ascend_pd.perf.shape import Shape

# (key, type) every result must carry, as `vllm bench serve --save-result` writes them.
REQUIRED = (("completed", int), ("total_input_tokens", int), ("total_output_tokens", int),
            ("mean_ttft_ms", float), ("mean_tpot_ms", float), ("request_throughput", float),
            ("output_throughput", float))
TPOT_VALUES = ("decode_efficiency", "step_overhead_s")
TTFT_VALUES = ("prefill_efficiency",)


@dataclass(frozen=True)
class BenchResult:
    path: str
    completed: int
    mean_input: float
    mean_output: float
    mean_ttft: float  # seconds
    mean_tpot: float  # seconds
    request_throughput: float
    output_throughput: float


def read_bench_result(path: str | Path) -> BenchResult:
    """One `vllm bench serve --save-result` JSON file, checked: a missing or wrong field names the file and field."""
    source = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=source,
                         fix="pass the JSON files `vllm bench serve --save-result` wrote") from exc
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}", file=source,
                         fix="pass the JSON files `vllm bench serve --save-result` wrote") from exc
    if not isinstance(data, dict):
        raise InputError("not a benchmark result (a JSON object)", file=source)
    values: dict[str, Any] = {}
    for key, kind in REQUIRED:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
            raise InputError(f"missing or not a number: {value!r}" if value is not None else "missing",
                             file=source, field=key, fix="run `vllm bench serve --save-result` to write it")
        values[key] = value
    if values["completed"] < 1 or values["total_output_tokens"] <= values["completed"]:
        raise InputError("no request completed with more than one output token", file=source, field="completed",
                         fix="benchmark with --random-output-len (or a dataset) of at least 2 tokens")
    for key in ("mean_ttft_ms", "mean_tpot_ms", "request_throughput", "output_throughput"):
        if values[key] <= 0:
            raise InputError(f"must be positive, not {values[key]}", file=source, field=key)
    return BenchResult(source, int(values["completed"]), values["total_input_tokens"] / values["completed"],
                       values["total_output_tokens"] / values["completed"], values["mean_ttft_ms"] / 1e3,
                       values["mean_tpot_ms"] / 1e3, float(values["request_throughput"]),
                       float(values["output_throughput"]))


def _shape(instance: Instance) -> Shape:
    p = instance.parallel
    return Shape(p.tp, p.dp, p.ep, p.pp)


def _one_shape(instances: list[Instance], role: str, source: str) -> Shape:
    shapes = {_shape(i) for i in instances}
    if len(shapes) > 1:
        raise InputError(f"{role} instances of {len(shapes)} shapes: a measurement cannot tell them apart",
                         file=source, field="instances", fix=f"measure a deployment whose {role} instances share "
                                                              "one parallel shape")
    return shapes.pop()


def bench_rows(deployment_path: str | Path, results: Sequence[BenchResult], mtp_acceptance: float = MTP_ACCEPTANCE,
               version: str | None = None) -> list[Row]:
    """The TPOT and TTFT rows of `results`, measured on the deployment in `deployment_path` running vllm-ascend
    `version` (default: the release the deployment pins, else the one ascend-pd pins)."""
    loaded = load_deployment(deployment_path)
    return _rows(loaded, str(deployment_path), results, mtp_acceptance,
                 version or loaded.deployment.vllm_ascend_version)


def _rows(loaded: LoadedDeployment, source: str, results: Sequence[BenchResult], mtp_acceptance: float,
          version: str | None) -> list[Row]:
    deployment = loaded.deployment
    # One fit holds one chip's values: on a cluster that mixes chips, the group the deployment runs on.
    cluster = deployment_group(loaded.cluster(), (p.node for i in deployment.instances for p in i.devices), source,
                               "a calibration fit")
    try:
        model = get_model(deployment.model.name)
    except InputError as exc:
        raise InputError(exc.message, file=source, field="model.name", fix=exc.fix) from None
    decoders = [i for i in deployment.instances if i.role in ("decode", "colocated")]
    first = [i for i in deployment.instances if i.role in ("prefill", "colocated")]
    if not decoders or not first:
        raise InputError("the deployment has no decode (or colocated) instance", file=source, field="instances")
    decode_shape = _one_shape(decoders, "decode", source)
    prefill_shape = _one_shape(first, "prefill", source)
    draft = draft_config(decoders[0])
    mtp = (draft.num_speculative_tokens or 0) if draft else 0
    decode_ranks = sum(i.parallel.dp for i in decoders)
    prefill_ranks = sum(i.parallel.dp for i in first)
    disaggregated = first[0].role == "prefill"
    kv_link = None
    if disaggregated:  # the tier between the first prefill and the first decode rank leaders
        p_leader, d_leader = first[0].devices[0], decoders[0].devices[0]
        kv_link = cluster.link_between(cluster.device(p_leader.node, p_leader.devices[0]),
                                       cluster.device(d_leader.node, d_leader.devices[0]))
    common = dict(model=model, cluster=cluster, quantization=deployment.model.quantization,
                  kv_dtype=deployment.model.kv_cache_dtype)
    platform, mla = platform_of(cluster), model.mla is not None
    implementation = deployment.connector.implementation
    decode_mode = execution_mode(platform, implementation, decoders[0], mla, version)
    prefill_mode = execution_mode(platform, implementation, first[0], mla, version)
    rows = []
    for r in results:
        name = Path(r.path).name
        batch = max(1.0, r.output_throughput * r.mean_tpot / decode_ranks)
        rows.append(Row(label=f"{name} TPOT", metric="tpot", shape=decode_shape, measured=r.mean_tpot,
                        batch_per_rank=batch, context=r.mean_input + r.mean_output / 2, mtp=mtp,
                        mtp_acceptance=mtp_acceptance if mtp else 0.0, mode=decode_mode, **common))
        rows.append(Row(label=f"{name} TTFT", metric="ttft", shape=prefill_shape, measured=r.mean_ttft,
                        prompt=r.mean_input, prompts_in_flight=r.request_throughput * r.mean_ttft / prefill_ranks,
                        batch_per_rank=batch, mtp=mtp, decode_shape=decode_shape if disaggregated else None,
                        kv_link=kv_link, kv_mode=deployment.connector.mode, mode=prefill_mode, **common))
    return rows


def values_to_fit(rows: Sequence[Row], names: Sequence[str] | None, source: str = "--fit") -> list[str]:
    """`names` if given (checked), else what the rows can determine: the prefill efficiency from TTFT rows, and
    from TPOT rows the decode efficiency and per-step cost (only the per-step cost from a single result)."""
    if names:
        unknown = [n for n in names if n not in BOUNDS]
        if unknown:
            raise InputError(f"cannot fit '{unknown[0]}'", field=source,
                             fix=f"fit some of {', '.join(BOUNDS)}")
        return list(names)
    tpot_rows = sum(1 for r in rows if r.metric == "tpot")
    chosen = list(TPOT_VALUES if tpot_rows > 2 else TPOT_VALUES[1:])
    return chosen + list(TTFT_VALUES)


def calibrate(deployment_path: str | Path, result_paths: Sequence[str | Path], base: str = DEFAULT_PROFILE,
              names: Sequence[str] | None = None, mtp_acceptance: float = MTP_ACCEPTANCE,
              version: str | None = None) -> FitResult:
    if base not in shipped_profiles():
        raise InputError(f"unknown profile '{base}'", field="--base", fix=f"use one of {', '.join(shipped_profiles())}")
    if not result_paths:
        raise InputError("no benchmark result given", fix="pass one or more `vllm bench serve --save-result` files")
    results = [read_bench_result(p) for p in result_paths]
    loaded = load_deployment(deployment_path)
    version = version or loaded.deployment.vllm_ascend_version
    rows = _rows(loaded, str(deployment_path), results, mtp_acceptance, version)
    chosen = values_to_fit(rows, names)
    return fit(load_calibration(base, rows[0].cluster.chip.id, version), rows, chosen)


def calibration_file(result: FitResult, base: str, deployment_path: str | Path,
                     result_paths: Sequence[str | Path]) -> str:
    """The YAML `--calibration FILE` reads: the base profile and the fitted values over it."""
    header = ("# Written by `ascend-pd calibrate`. Pass it to estimate, plan and simulate with --calibration FILE.\n"
              f"# Fitted on {len(result_paths)} vllm bench serve result(s) measured on {deployment_path}.\n")
    body = {"base": base, "values": {k: float(f"{v:.6g}") for k, v in result.values.items()},
            "fitted_on": {"deployment": str(deployment_path), "results": [str(p) for p in result_paths],
                          "vllm_ascend": result.calibration.engine_version}}
    return header + yaml.safe_dump(body, sort_keys=False)
