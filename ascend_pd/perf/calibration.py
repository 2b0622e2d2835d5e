"""Calibration data of the cost model: efficiencies and latency terms per chip, read from calibration.yaml."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import yaml

CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")


@dataclass(frozen=True)
class Calibration:
    """How much of a chip's peaks serving achieves, and the fixed costs peaks do not capture."""

    prefill_efficiency: float  # achieved fraction of peak FLOP/s in prefill (matmuls and attention)
    decode_efficiency: float  # achieved fraction of peak FLOP/s in decode
    hbm_efficiency: float  # achieved fraction of HBM bandwidth
    memory_op_latency_s: float  # fixed cost of one launched kernel
    ops_per_layer: int  # kernels per transformer layer
    prefill_overlap: bool  # communication hides behind compute in prefill (micro-batching)

    def with_values(self, **values: float) -> "Calibration":
        return replace(self, **values)


@cache
def _raw() -> dict:
    return yaml.safe_load(CALIBRATION_FILE.read_text(encoding="utf-8"))


def calibration_for(chip_id: str) -> Calibration:
    """The calibration of `chip_id`: its own entries over the defaults."""
    raw = _raw()
    values = dict(raw["default"], **(raw.get("chips", {}).get(chip_id) or {}))
    return Calibration(**values)
