"""The built-in model catalog, and the one lookup that takes a catalog id or a local model path."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from ascend_pd.errors import InputError
from ascend_pd.models.hf_config import from_hf_config, spec_from_config
from ascend_pd.models.spec import ModelSpec


@cache
def model_catalog() -> dict[str, ModelSpec]:
    raw = yaml.safe_load(Path(__file__).with_name("catalog.yaml").read_text())["models"]
    return {model_id: spec_from_config(entry["config"], model_id, entry.get("description", ""))
            for model_id, entry in raw.items()}


def get_model(name_or_path: str) -> ModelSpec:
    """A catalog model by id (case-insensitive), or a local directory / config.json by path."""
    catalog = model_catalog()
    key = name_or_path.lower()
    if key in catalog:
        return catalog[key]
    path = Path(name_or_path)
    if path.exists():
        return from_hf_config(path)
    raise InputError(f"unknown model '{name_or_path}'", field="model",
                     fix=f"use a catalog id ({', '.join(catalog)}) or a directory holding config.json")
