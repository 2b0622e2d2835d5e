"""Read YAML files into pydantic models, turning every failure into an InputError with file, line, field and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ascend_pd.errors import InputError

Loc = tuple[Any, ...]
# libyaml's loader when PyYAML was built with it: a 768-device plan parses in a tenth of the time.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # libyaml's emitter: ten times faster on a big plan
    """Multi-line strings (scripts in a ConfigMap) as literal blocks, which read as the file they hold."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)
M = TypeVar("M", bound=BaseModel)


def _line_map(node: yaml.Node, path: Loc, lines: dict[Loc, int]) -> None:
    """Record the 1-based line of every mapping key and sequence item under `node`."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            lines[path + (key,)] = key_node.start_mark.line + 1
            _line_map(value_node, path + (key,), lines)
            lines[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _line_map(item, path + (index,), lines)


def _compose_and_construct(text: str) -> tuple[yaml.Node | None, Any]:
    """Parse once: the node tree (for line numbers) and the data built from that same tree."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def parse_yaml(text: str | bytes, source: str) -> tuple[Any, dict[Loc, int]]:
    """Parse one YAML document; return the data and a map from key path to line number."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        node, data = _compose_and_construct(text)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=source,
                         fix="save the file as UTF-8 YAML") from None
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise InputError(f"malformed YAML: {exc.problem or exc}", file=source, line=line,
                         fix="check indentation, quotes and colons near that line") from None
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", file=source, fix="check the file is a YAML mapping") from None
    except (ValueError, RecursionError, OverflowError) as exc:
        raise InputError(f"cannot read YAML: {exc}", file=source, fix="check the file is a YAML mapping") from None
    lines: dict[Loc, int] = {}
    if node is not None:
        _line_map(node, (), lines)
    return data, lines


def dump_yaml(data: Any, **options: Any) -> str:
    """Plain YAML (no Python tags), keys in the order given."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, **options)


def read_text(path: str | Path) -> str:
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", file=str(path), fix="check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a file", file=str(path), fix="name a YAML file") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})", file=str(path),
                         fix="save the file as UTF-8 YAML") from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=str(path), fix="check the path and permissions") from None


def dotted(loc: Loc) -> str:
    """('instances', 0, 'parallel', 'tp') -> 'instances[0].parallel.tp'"""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def nearest_line(lines: dict[Loc, int], loc: Loc) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _fix_for(error: dict[str, Any], model: type[BaseModel]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "remove this key or check its spelling (see the schema in the README)"
    if kind == "missing":
        return "add this key"
    if kind.startswith("literal_error"):
        expected = error.get("ctx", {}).get("expected")
        return f"use one of: {expected}" if expected else "use one of the allowed values"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "write a whole number"
    if kind in ("float_parsing", "float_type"):
        return "write a number"
    if kind in ("string_type",):
        return "write a string"
    if kind in ("list_type",):
        return "write a YAML list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "write a YAML mapping"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return "use a value in the allowed range"
    return f"see the {model.__name__} schema in the README"


def validate_model(model: type[M], data: Any, source: str, lines: dict[Loc, int] | None = None) -> M:
    """Validate `data` into `model`; on failure raise one InputError naming every bad field."""
    lines = lines or {}
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise InputError(f"expected a YAML mapping at the top level, got {got}", file=source, line=1,
                         fix=f"write a {model.__name__} document (see the README)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        loc = tuple(first["loc"])
        message = first["msg"]
        if len(errors) > 1:
            others = "; ".join(f"{dotted(tuple(e['loc'])) or '<top>'}: {e['msg']}" for e in errors[1:4])
            more = f" (+{len(errors) - 4} more)" if len(errors) > 4 else ""
            message += f"\n  also: {others}{more}"
        raise InputError(message, file=source, field=dotted(loc) or None, line=nearest_line(lines, loc),
                         fix=_fix_for(first, model)) from None


def load_model(model: type[M], path: str | Path) -> tuple[M, dict[Loc, int]]:
    """Read `path` and validate it into `model`; returns the model and the line map of the file."""
    source = str(path)
    data, lines = parse_yaml(read_text(path), source)
    return validate_model(model, data, source, lines), lines
