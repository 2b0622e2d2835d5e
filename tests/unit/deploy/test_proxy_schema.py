"""proxy.workers and proxy.extra_nodes: defaults keep existing files valid, bad values are refused with the field."""

import pytest
import yaml

from ascend_pd.deploy import dump_deployment, load_deployment, parse_deployment
from ascend_pd.errors import InputError

from .conftest import example, example_paths


def parsed(data: dict):
    return parse_deployment(yaml.safe_dump(data), "test.yaml").deployment


@pytest.mark.parametrize("path", example_paths(), ids=lambda p: p.stem)
def test_shipped_examples_run_one_proxy_replica(path):
    # the planned examples carry the worker count plan sized (`proxy.workers`); none spreads the proxy over nodes
    proxy = load_deployment(path).deployment.proxy
    assert proxy.extra_nodes == []
    assert proxy.nodes == [proxy.node]


def test_workers_and_extra_nodes_load_and_dump_back():
    data = example("atlas-800i-a2-x4-qwen3-32b")
    data["proxy"].update(workers=4, extra_nodes=["a2-01", "a2-02"])
    deployment = parsed(data)
    assert deployment.proxy.workers == 4
    assert deployment.proxy.nodes == ["a2-00", "a2-01", "a2-02"]
    assert parse_deployment(dump_deployment(deployment)).deployment == deployment


@pytest.mark.parametrize("key, value, fix", [
    ("workers", 0, "allowed range"),
    ("workers", "all", "whole number"),
    ("extra_nodes", "a2-01", "YAML list"),
])
def test_bad_workers_or_extra_nodes_are_refused_naming_the_field(key, value, fix):
    data = example("atlas-800i-a2-x4-qwen3-32b")
    data["proxy"][key] = value
    with pytest.raises(InputError) as raised:
        parsed(data)
    assert raised.value.field.startswith(f"proxy.{key}") and fix in raised.value.fix


def test_replicas_is_not_a_proxy_key():
    data = example("atlas-800i-a2-x4-qwen3-32b")
    data["proxy"]["replicas"] = 2  # the replica count follows from extra_nodes
    with pytest.raises(InputError) as raised:
        parsed(data)
    assert raised.value.field == "proxy.replicas"
