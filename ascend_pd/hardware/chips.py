"""Accelerator specs (910B variants, 910C dies, a CPU stand-in), loaded from chips.yaml, in SI units."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

GIB = 1024**3


@dataclass(frozen=True)
class Chip:
    """One device as vLLM sees it. Every figure is per device; a package holds `dies_per_package` devices."""

    id: str
    description: str
    dies_per_package: int
    hbm_bytes: int
    hbm_bandwidth: float  # bytes/s
    bf16_flops: float  # FLOP/s, dense
    int8_ops: float  # OP/s, dense
    ai_cores: int
    vector_cores: int
    unified_buffer_bytes: int

    def peak_flops(self, precision: str) -> float:
        """Peak dense throughput for matmuls at `precision` ('bf16' or 'int8')."""
        return self.int8_ops if precision == "int8" else self.bf16_flops


@cache
def chip_catalog() -> dict[str, Chip]:
    raw = yaml.safe_load((Path(__file__).with_name("chips.yaml")).read_text())["chips"]
    return {
        chip_id: Chip(
            id=chip_id,
            description=spec["description"],
            dies_per_package=spec["dies_per_package"],
            hbm_bytes=int(spec["hbm_gib"] * GIB),
            hbm_bandwidth=spec["hbm_bandwidth_gbytes_per_s"] * 1e9,
            bf16_flops=spec["bf16_tflops"] * 1e12,
            int8_ops=spec["int8_tops"] * 1e12,
            ai_cores=spec["ai_cores"],
            vector_cores=spec["vector_cores"],
            unified_buffer_bytes=spec["unified_buffer_kib"] * 1024,
        )
        for chip_id, spec in raw.items()
    }


def get_chip(chip_id: str) -> Chip:
    catalog = chip_catalog()
    try:
        return catalog[chip_id.lower()]
    except KeyError:
        raise KeyError(f"unknown chip '{chip_id}'; known: {', '.join(catalog)}") from None
