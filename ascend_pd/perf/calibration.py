"""Calibration of the cost model: how much of a chip's peaks serving achieves and the fixed costs of every step.

Shipped profiles live in calibration.yaml, one per software stack (`vllm-ascend`, the default, and
`cloudmatrix-infer`). A user's own file, as `ascend-pd calibrate` writes it, holds one profile's values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ascend_pd.errors import InputError

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
    layer_overhead_piecewise_s: float  # the same when graph pieces replay and attention runs between them
    layer_overhead_graph_s: float  # the same when the whole forward pass replays one captured graph
    collective_launch_s: float  # fixed cost of one collective (TP all-reduce, EP dispatch or combine) per call
    step_overhead_s: float  # per engine step: scheduling, input preparation, sampling launch
    sampling_per_token_s: float  # per token a step verifies or samples
    request_overhead_s: float  # per request, on its way to the first token outside the engine's steps (HTTP,
    # tokenizing, the first token's detokenizing and streaming): TTFT as a client measures it
    prefill_overlap: bool  # communication hides behind compute in prefill (micro-batching)
    name: str = DEFAULT_PROFILE  # the profile's name, or the file it came from

    def with_values(self, **values: Any) -> "Calibration":
        return replace(self, **values)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


VALUE_FIELDS = tuple(f.name for f in fields(Calibration) if f.name != "name")


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


def _profile(name: str, chip_id: str) -> Calibration:
    raw = _shipped()[name]
    values = dict(raw["default"], **(raw.get("chips", {}).get(chip_id) or {}))
    return _build(values, name, f"{CALIBRATION_FILE.name}: {name}")


def _from_file(path: Path, chip_id: str) -> Calibration:
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
    values = _profile(base, chip_id).as_dict()
    values.pop("name")
    for key, value in raw["values"].items():
        if key not in values:
            raise InputError(f"unknown calibration value '{key}'", file=str(path), field=f"values.{key}",
                             fix=f"use only {', '.join(VALUE_FIELDS)}")
        if not isinstance(value, type(values[key])) and not (isinstance(values[key], float)
                                                             and isinstance(value, int)):
            raise InputError(f"'{key}' must be a {type(values[key]).__name__}, not {value!r}", file=str(path),
                             field=f"values.{key}")
        values[key] = value
    return _build(values, str(path), str(path))


def load_calibration(ref: str | None, chip_id: str) -> Calibration:
    """The calibration `ref` names for `chip_id`: a shipped profile (default: DEFAULT_PROFILE) or a file."""
    if ref is None or ref in _shipped():
        return _profile(ref or DEFAULT_PROFILE, chip_id)
    path = Path(ref)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return _from_file(path, chip_id)
    raise InputError(f"unknown calibration '{ref}'", field="--calibration",
                     fix=f"name a profile ({', '.join(shipped_profiles())}) or a calibration YAML file")


def pricing_sentence(name: str) -> str:
    """Which profile priced a plan and why, in one sentence: `name` is a Calibration's name (a profile or a file)."""
    if name not in _shipped():
        return (f"Priced with the calibration file `{name}`, chosen with --calibration: values fitted to measurements "
                "over a shipped profile.")
    chosen = "the default" if name == DEFAULT_PROFILE else "chosen with --calibration"
    return f"Priced with the `{name}` calibration profile, {chosen}: it prices {_shipped()[name]['prices']}."


def calibration_for(chip_id: str) -> Calibration:
    """The default profile's calibration of `chip_id`."""
    return load_calibration(None, chip_id)
