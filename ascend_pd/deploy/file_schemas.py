"""JSON Schemas of the cluster and deployment files, made from their pydantic models, and the first line that names
one for a YAML editor (the VS Code YAML extension reads `# yaml-language-server: $schema=...`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from ascend_pd.deploy.schema import Deployment
from ascend_pd.hardware import configs_dir
from ascend_pd.hardware.schema import ClusterFile

FileKind = Literal["cluster", "deployment"]
MODELS: dict[FileKind, type[BaseModel]] = {"cluster": ClusterFile, "deployment": Deployment}
DIALECT = "https://json-schema.org/draft/2020-12/schema"  # the dialect pydantic writes
MODELINE_START = "# yaml-language-server: $schema="


def schema_file_name(kind: FileKind) -> str:
    return f"{kind}.schema.json"


def schema_text(kind: FileKind) -> str:
    """The schema of one file kind as JSON text, exactly as the shipped copy holds it."""
    schema = {"$schema": DIALECT, **MODELS[kind].model_json_schema()}
    return json.dumps(schema, indent=2) + "\n"


def shipped_schema(kind: FileKind) -> Path:
    """The copy shipped beside the example files: superpod_configs/schemas/, in a checkout and in the wheel alike,
    so the examples name it by a relative path that holds in both."""
    return configs_dir() / "schemas" / schema_file_name(kind)


def modeline(reference: str) -> str:
    return f"{MODELINE_START}{reference}\n"


def with_modeline_beside(kind: FileKind, text: str) -> str:
    """`text` (a YAML file) with a first line naming its schema as a file beside it, in place of one it had: a copy
    of a file moves away from the schema its own line named."""
    body = text.partition("\n")[2] if text.startswith(MODELINE_START) else text
    return modeline(schema_file_name(kind)) + body


def with_schema_beside(kind: FileKind, path: str | Path, text: str) -> str:
    """`text` (a YAML file about to be written at `path`) with a first line naming a copy of its schema, which this
    writes beside `path`: a relative name that works offline and keeps working when the directory is copied."""
    (Path(path).parent / schema_file_name(kind)).write_text(schema_text(kind), encoding="utf-8")
    return with_modeline_beside(kind, text)
