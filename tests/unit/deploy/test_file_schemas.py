"""The JSON Schemas shipped for cluster and deployment files are the ones the pydantic models make today, every
shipped file passes them, and every shipped file's first line names the right one by a path that exists."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ascend_pd.deploy.file_schemas import MODELINE_START, MODELS, schema_text, shipped_schema
from ascend_pd.hardware import configs_dir

SHIPPED = {"cluster": sorted((configs_dir() / "clusters").glob("*.yaml")),
           "deployment": sorted((configs_dir() / "deployments").glob("*.yaml"))}
SHIPPED_FILES = [(kind, path) for kind, paths in SHIPPED.items() for path in paths]


def validator(kind: str) -> jsonschema.protocols.Validator:
    schema = json.loads(shipped_schema(kind).read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@pytest.mark.parametrize("kind", MODELS)
def test_shipped_schema_is_what_the_models_make(kind):
    assert shipped_schema(kind).read_text() == schema_text(kind), \
        f"{shipped_schema(kind)} differs from the {MODELS[kind].__name__} model: run `python tools/make_schemas.py`"


@pytest.mark.parametrize(("kind", "path"), SHIPPED_FILES, ids=lambda v: getattr(v, "name", v))
def test_every_shipped_file_passes_its_schema(kind, path):
    errors = [e.message for e in validator(kind).iter_errors(yaml.safe_load(path.read_text()))]
    assert not errors, f"{path}: {errors}"


@pytest.mark.parametrize(("kind", "path"), SHIPPED_FILES, ids=lambda v: getattr(v, "name", v))
def test_every_shipped_file_names_its_schema_on_its_first_line(kind, path):
    first = path.read_text().splitlines()[0]
    assert first.startswith(MODELINE_START)
    named = (path.parent / first.removeprefix(MODELINE_START)).resolve()
    assert named == shipped_schema(kind).resolve()


def test_the_schema_refuses_what_the_model_refuses():
    data = yaml.safe_load(SHIPPED["cluster"][0].read_text())
    check = validator("cluster")
    assert check.is_valid(data)
    assert not check.is_valid({**data, "node_group": data["node_groups"]})  # a misspelt key
    listed = {"type": data["node_groups"][0]["type"], "nodes": [{"name": "n1", "host_ip": "10.0.0.300"}]}
    assert not check.is_valid({**data, "node_groups": [listed]})  # not an IPv4 address
    listed["nodes"][0]["host_ip"] = "10.0.0.3"
    assert check.is_valid({**data, "node_groups": [listed]})


def test_the_schema_files_ship_inside_the_package_data():
    """pyproject.toml puts superpod_configs/ into the wheel as ascend_pd/superpod_configs/; the schemas are in it."""
    pyproject = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert '"superpod_configs" = "ascend_pd/superpod_configs"' in pyproject
    for kind in MODELS:
        assert shipped_schema(kind).is_relative_to(configs_dir())


def test_a_bundle_carries_the_schemas_its_first_lines_name(tmp_path):
    """Render copies a deployment whose cluster is a file: both copies name a schema beside them, which the bundle
    holds and which they pass, wherever the bundle is copied to."""
    from ascend_pd.deploy import load_deployment
    from ascend_pd.render import render_bundle

    cluster = tmp_path / "site.yaml"
    cluster.write_text((configs_dir() / "clusters" / "local-cpu.yaml").read_text())
    source = yaml.safe_load((configs_dir() / "deployments" / "local-cpu-tiny-gqa.yaml").read_text())
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(yaml.safe_dump({**source, "cluster": str(cluster)}))
    files = render_bundle(load_deployment(deployment)).files
    for kind, name in (("deployment", "deployment.yaml"), ("cluster", "cluster.yaml")):
        first, _, body = files[name].partition("\n")
        assert first == f"{MODELINE_START}{kind}.schema.json"
        schema = json.loads(files[f"{kind}.schema.json"])
        jsonschema.validate(yaml.safe_load(body), schema)
