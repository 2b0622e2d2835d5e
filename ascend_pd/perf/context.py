"""Build a CostModel from what a user names: a model, and a cluster or a chip (or neither: the default cluster)."""

from __future__ import annotations

from ascend_pd.errors import InputError
from ascend_pd.hardware import DEFAULT_CLUSTER, Cluster, chip_catalog, load_cluster, shipped_clusters
from ascend_pd.models import ModelSpec, get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel

LARGE_MODEL_SHARE = 0.5  # bf16 weights above this share of a node's HBM: default to W8A8


def resolve_cluster(cluster: str | None, chip: str | None) -> Cluster:
    """`cluster` if given (its chip must match `chip`), else the default cluster if built from `chip`, else the first
    shipped cluster that is."""
    if cluster or not chip:
        found = load_cluster(cluster)
        if chip and found.chip.id != chip.lower():
            raise InputError(f"cluster '{found.name}' is built from {found.chip.id}, not {chip}", field="--chip",
                             fix="drop --chip, or name a cluster with that chip")
        return found
    if chip.lower() not in chip_catalog():
        raise InputError(f"unknown chip '{chip}'", field="--chip", fix=f"use one of {', '.join(chip_catalog())}")
    names = sorted(shipped_clusters(), key=lambda name: name != DEFAULT_CLUSTER)
    for name in names:
        found = load_cluster(name)
        if found.chip.id == chip.lower():
            return found
    raise InputError(f"no shipped cluster is built from {chip}", field="--chip",
                     fix="pass --cluster with a cluster YAML file that uses this chip")


def default_quantization(model: ModelSpec, cluster: Cluster) -> str:
    node_hbm = cluster.chip.hbm_bytes * cluster.devices_per_node
    return "w8a8" if model.weight_bytes("bf16") > LARGE_MODEL_SHARE * node_hbm else "bf16"


def cost_model(model: str, cluster: str | None = None, chip: str | None = None, quantization: str | None = None,
               kv_dtype: str = "bf16", calibration: str | None = None) -> CostModel:
    """`calibration`: a shipped profile name or a calibration file (default: the default profile)."""
    spec = get_model(model)
    found = resolve_cluster(cluster, chip)
    quant = quantization or default_quantization(spec, found)
    return CostModel(spec, found.chip, found, quant, kv_dtype, load_calibration(calibration, found.chip.id))
