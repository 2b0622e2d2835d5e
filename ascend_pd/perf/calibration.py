"""Calibration of the cost model: how much of a chip's peaks serving achieves and the fixed costs of every step.

Shipped profiles live in calibration.yaml, one per software stack (`vllm-ascend`, the default, and
`cloudmatrix-infer`). A user's own file, as `ascend-pd calibrate` writes it, holds one profile's values.

A profile may price the host's costs by era of the engine's release: `eras` names each era's first vllm-ascend
release, and a value written `name@era` replaces `name` from that era on (a later era without its own keeps the
earlier one's). A calibration is a profile resolved for one chip and one release.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from ascend_pd.defaults import VLLM_ASCEND_RELEASE
from ascend_pd.errors import InputError
from ascend_pd.perf.engine_version import engine_version

CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")
# The default follows the engine: every engine render writes runs vllm-ascend, so a plan is priced by the profile
# fitted to vllm-ascend's own measurements unless --calibration names another.
DEFAULT_PROFILE = "vllm-ascend"
# Huawei's CloudMatrix-Infer stack (arXiv 2506.12708): the values every fit of another profile starts from.
PAPER_PROFILE = "cloudmatrix-infer"


@dataclass(frozen=True)
class Calibration:
    """How much of a chip's peaks serving achieves, and the fixed costs peaks do not capture (seconds)."""

    prefill_efficiency: float  # achieved fraction of peak FLOP/s in prefill (matmuls and attention)
    prefill_expert_ratio: float  # prefill's MoE expert matmuls (grouped, few tokens per expert) run at this share of it
    decode_efficiency: float  # achieved fraction of peak FLOP/s in decode
    hbm_efficiency: float  # achieved fraction of HBM bandwidth
    kernel_launch_s: float  # fixed cost of one launched kernel
    ops_per_layer: int  # kernels per transformer layer
    layer_overhead_eager_s: float  # framework cost per layer of a forward pass run op by op (Python, dispatch)
    layer_overhead_moe_eager_s: float  # what a MoE layer run op by op adds to it (routing, permutation, dispatch)
    layer_overhead_piecewise_s: float  # the same when graph pieces replay and attention runs between them
    layer_overhead_graph_s: float  # the same when the whole forward pass replays one captured graph
    collective_launch_s: float  # fixed cost of one collective (TP all-reduce, EP dispatch or combine) per call
    step_overhead_s: float  # per engine step: scheduling, input preparation, sampling launch
    sampling_per_token_s: float  # per token a step verifies or samples
    request_overhead_s: float  # per request, on its way to the first token outside the engine's steps (HTTP,
    # tokenizing, the first token's detokenizing and streaming): TTFT as a client measures it
    prefill_overlap: bool  # communication hides behind compute in prefill (micro-batching)
    name: str = DEFAULT_PROFILE  # the profile's name, or the file it came from
    engine_version: str = VLLM_ASCEND_RELEASE  # the vllm-ascend release priced
    era: str = ""  # the profile's era of host costs that release falls in ("" for a profile without eras)

    def with_values(self, **values: Any) -> "Calibration":
        return replace(self, **values)


VALUE_FIELDS = tuple(f.name for f in fields(Calibration) if f.name not in ("name", "engine_version", "era"))
ERA_MARK = "@"  # `step_overhead_s@2026`: the value from era 2026 on


def era_values(values: dict[str, Any], era: str, eras: list[str]) -> dict[str, Any]:
    """`values` (plain names and `name@era` keys) as plain names for `era`: each name takes its latest value from
    an era up to `era` in the order of `eras`, else its plain one."""
    plain = {name: value for name, value in values.items() if ERA_MARK not in name}
    for earlier in eras[:eras.index(era) + 1] if era else []:
        plain.update({name.split(ERA_MARK)[0]: value for name, value in values.items()
                      if name.endswith(ERA_MARK + earlier)})
    return plain


@cache
def _shipped() -> dict:
    return yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))["profiles"]


def shipped_profiles() -> list[str]:
    return list(_shipped())


def _build(values: dict[str, Any], name: str, source: str) -> Calibration:
    unknown = sorted(set(values) - set(VALUE_FIELDS))
    missing = sorted(set(VALUE_FIELDS) - set(values))
    if unknown or missing:
        problem = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise InputError(f"calibration {problem}", file=source, field=(unknown or missing)[0],
                         fix=f"a calibration holds exactly: {', '.join(VALUE_FIELDS)}")
    return Calibration(**values, name=name)


def profile_eras(name: str) -> dict[str, Version]:
    """The eras of host costs of shipped profile `name`, oldest first: era -> its first vllm-ascend release."""
    return {era: Version(first) for era, first in (_shipped()[name].get("eras") or {}).items()}


def era_of(name: str, version: Version) -> str:
    """The era of profile `name` that vllm-ascend `version` falls in: the last to begin at or before it (the first
    era holds older releases too); "" for a profile without eras."""
    eras = profile_eras(name)
    return next((era for era, first in reversed(eras.items()) if first <= version), next(iter(eras), ""))


def _profile(name: str, chip_id: str, version: Version) -> Calibration:
    raw = _shipped()[name]
    era = era_of(name, version)
    values = era_values(dict(raw["default"], **(raw.get("chips", {}).get(chip_id) or {})), era,
                        list(profile_eras(name)))
    return replace(_build(values, name, f"{CALIBRATION_FILE.name}: {name}"), engine_version=str(version), era=era)


def _from_file(path: Path, chip_id: str, version: Version) -> Calibration:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read calibration file: {exc.strerror}", file=str(path),
                         fix="pass a profile name or the path of a file `ascend-pd calibrate` wrote") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"calibration file is not YAML: {exc}", file=str(path)) from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("values"), dict):
        raise InputError("calibration file has no `values` mapping", file=str(path), field="values",
                         fix="write it with `ascend-pd calibrate`")
    base = raw.get("base", DEFAULT_PROFILE)
    if base not in _shipped():
        raise InputError(f"unknown base profile '{base}'", file=str(path), field="base",
                         fix=f"use one of {', '.join(shipped_profiles())}")
    base_calibration = _profile(base, chip_id, version)
    values = {name: getattr(base_calibration, name) for name in VALUE_FIELDS}
    for key, value in raw["values"].items():
        if key not in values:
            raise InputError(f"unknown calibration value '{key}'", file=str(path), field=f"values.{key}",
                             fix=f"use only {', '.join(VALUE_FIELDS)}")
        if not isinstance(value, type(values[key])) and not (isinstance(values[key], float)
                                                             and isinstance(value, int)):
            raise InputError(f"'{key}' must be a {type(values[key]).__name__}, not {value!r}", file=str(path),
                             field=f"values.{key}")
        values[key] = value
    return replace(_build(values, str(path), str(path)), engine_version=base_calibration.engine_version,
                   era=base_calibration.era)


def load_calibration(ref: str | None, chip_id: str, version: str | None = None) -> Calibration:
    """The calibration `ref` names for `chip_id` and vllm-ascend release `version` (default: the one ascend-pd
    pins): a shipped profile (default: DEFAULT_PROFILE) or a file."""
    release = engine_version(version)
    if ref is None or ref in _shipped():
        return _profile(ref or DEFAULT_PROFILE, chip_id, release)
    path = Path(ref)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return _from_file(path, chip_id, release)
    raise InputError(f"unknown calibration '{ref}'", field="--calibration",
                     fix=f"name a profile ({', '.join(shipped_profiles())}) or a calibration YAML file")


def pricing_sentence(name: str, version: str = VLLM_ASCEND_RELEASE) -> str:
    """Which profile priced a plan and why, in one sentence: `name` is a Calibration's name (a profile or a file),
    `version` the vllm-ascend release it priced."""
    if name not in _shipped():
        return (f"Priced with the calibration file `{name}`, chosen with --calibration: values fitted to measurements "
                "over a shipped profile.")
    chosen = "the default" if name == DEFAULT_PROFILE else "chosen with --calibration"
    return (f"Priced with the `{name}` calibration profile, {chosen}: it prices {_shipped()[name]['prices']}. Each "
            f"engine is priced in the mode vllm-ascend {version} gives its flags.")


def calibration_for(chip_id: str) -> Calibration:
    """The default profile's calibration of `chip_id`."""
    return load_calibration(None, chip_id)
