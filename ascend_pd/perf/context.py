"""Build a CostModel from what a user names: a model, and a cluster or a chip (or neither: the default cluster)."""

from __future__ import annotations

from ascend_pd.errors import InputError
from ascend_pd.hardware import DEFAULT_CLUSTER, Cluster, chip_catalog, load_cluster, shipped_clusters
from ascend_pd.models import ModelSpec, get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel

LARGE_MODEL_SHARE = 0.5  # bf16 weights above this share of a node's HBM: default to W8A8


def resolve_cluster(cluster: str | None, chip: str | None) -> Cluster:
    """`cluster` if given (its nodes of `chip` when named, and a cluster that mixes chips needs it named), else the
    default cluster if built from `chip`, else the first shipped cluster that is."""
    if cluster or not chip:
        found = load_cluster(cluster)
        ids = [c.id for c in found.chips]
        if chip and chip.lower() not in ids:
            raise InputError(f"cluster '{found.name}' is built from {' and '.join(ids)}, not {chip}", field="--chip",
                             fix="drop --chip, or name a cluster with that chip")
        if not chip and len(ids) > 1:
            raise InputError(f"cluster '{found.name}' mixes {found.describe_chips()}; say which to price",
                             file=found.source or None, field="--chip",
                             fix=f"name the nodes' chip to price: {' or '.join(f'--chip {i}' for i in ids)}")
        return found.chip_groups[chip.lower()] if chip else found
    if chip.lower() not in chip_catalog():
        raise InputError(f"unknown chip '{chip}'", field="--chip", fix=f"use one of {', '.join(chip_catalog())}")
    names = sorted(shipped_clusters(), key=lambda name: name != DEFAULT_CLUSTER)
    for name in names:
        found = load_cluster(name)
        if chip.lower() in found.chip_groups:
            return found.chip_groups[chip.lower()]
    raise InputError(f"no shipped cluster is built from {chip}", field="--chip",
                     fix="pass --cluster with a cluster YAML file that uses this chip")


def default_quantization(model: ModelSpec, cluster: Cluster) -> str:
    node_hbm = cluster.chip.hbm_bytes * cluster.devices_per_node
    return "w8a8" if model.weight_bytes("bf16") > LARGE_MODEL_SHARE * node_hbm else "bf16"


def _priced(spec: ModelSpec, cluster: Cluster, quantization: str | None, kv_dtype: str,
            calibration: str | None, version: str | None) -> CostModel:
    quant = quantization or default_quantization(spec, cluster)
    return CostModel(spec, cluster.chip, cluster, quant, kv_dtype,
                     load_calibration(calibration, cluster.chip.id, version))


def cost_model(model: str, cluster: str | None = None, chip: str | None = None, quantization: str | None = None,
               kv_dtype: str = "bf16", calibration: str | None = None, version: str | None = None) -> CostModel:
    """`calibration`: a shipped profile name or a calibration file (default: the default profile); `version`: the
    vllm-ascend release priced (default: the one ascend-pd pins)."""
    return _priced(get_model(model), resolve_cluster(cluster, chip), quantization, kv_dtype, calibration, version)


def chip_group_costs(model: str, cluster: str | None = None, quantization: str | None = None,
                     kv_dtype: str = "bf16", calibration: str | None = None,
                     version: str | None = None) -> list[CostModel]:
    """A cost model on each chip group of `cluster` (one for a cluster of one chip), for a planner that plans each
    group on its own; without --quant each group gets the quantization its own chip's memory calls for."""
    spec = get_model(model)
    groups = load_cluster(cluster).chip_groups.values()
    return [_priced(spec, group, quantization, kv_dtype, calibration, version) for group in groups]
