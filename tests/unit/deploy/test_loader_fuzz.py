"""Any bytes given as a deployment or cluster file give a diagnostic or an InputError, never another exception."""

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_pd.deploy import parse_deployment, validate
from ascend_pd.errors import InputError
from ascend_pd.hardware.loader import build_cluster
from ascend_pd.hardware.schema import ClusterFile
from ascend_pd.yamlfile import parse_yaml, validate_model
from tests import fuzz

from .conftest import example

BASE = example("atlas-800i-a2-x4-qwen3-32b")


def _load_and_validate(text):
    try:
        loaded = parse_deployment(text, "fuzz.yaml")
    except InputError as exc:
        assert exc.file == "fuzz.yaml" and exc.message
        return
    try:
        validate(loaded)
    except InputError as exc:
        assert exc.message


@settings(max_examples=fuzz.examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_any_bytes_as_deployment(data):
    _load_and_validate(data)


@settings(max_examples=fuzz.examples(200), deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abc:-[]{}\n '\"#&*!|>%@`0123456789.")), max_size=200))
def test_yaml_punctuation_soup_as_deployment(text):
    _load_and_validate(text)


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 70000), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.integers(-2, 20), max_size=4))


def _paths(data, prefix=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield prefix + (key,)
            yield from _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield prefix + (index,)
            yield from _paths(value, prefix + (index,))


PATHS = list(_paths(BASE))


@settings(max_examples=fuzz.examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), scalars), min_size=1, max_size=3))
def test_one_field_replaced_by_any_value(changes):
    data = copy.deepcopy(BASE)
    for path, value in changes:
        target = data
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    _load_and_validate(yaml.safe_dump(data))


@settings(max_examples=fuzz.examples(200), deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_as_cluster(data):
    try:
        parsed, lines = parse_yaml(data, "cluster.yaml")
        spec = validate_model(ClusterFile, parsed, "cluster.yaml", lines)
        build_cluster(spec, "cluster.yaml")
    except InputError as exc:
        assert exc.file == "cluster.yaml"
