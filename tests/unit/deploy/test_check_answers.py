"""`ascend-pd check` asks engines and proxy replicas for JSON (/health, /v1/models, /version) and reads fields of
it. Whatever JSON a peer answers, of whatever shape, each probe gives its row (and a replica its view), never a
library's exception: a Hypothesis fuzz against a real server."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.check.probes import ProxyView, check_engine, check_proxy
from ascend_pd.deploy.layout import engine_ranks
from tests import fuzz
from tests.fakes.threaded_http import Server, send
from tests.known_shapes import known_shape

SCALAR = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
JSON = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=4), max_leaves=12)
ANY = SCALAR | JSON  # a field's value: a scalar as often as anything else
# Each answer is any JSON, or the shape the probe reads with anything in its fields.
HEALTH = JSON | st.fixed_dictionaries({"mode": ANY, "status": ANY, "backends": ANY | st.lists(
    ANY | st.fixed_dictionaries({"url": ANY, "role": ANY, "state": ANY}), max_size=3)})
MODELS = JSON | st.fixed_dictionaries({"data": ANY | st.lists(ANY | st.fixed_dictionaries({"id": ANY}), max_size=3)})
VERSION = JSON | st.fixed_dictionaries({"version": ANY})


@pytest.fixture(scope="module")
def peer():
    class Peer:
        answers: dict[str, object] = {}
        status = 200

    server = Server(lambda handler: send(handler, Peer.status, json.dumps(Peer.answers.get(handler.path)).encode()))
    Peer.url = server.url
    yield Peer
    server.close()


@pytest.fixture(scope="module")
def rank(peer):
    first = engine_ranks(load_deployment(known_shape("local-cpu-tiny-gqa")))[0]
    host, port = peer.url.removeprefix("http://").split(":")
    return dataclasses.replace(first, host=host, http_port=int(port))


@settings(max_examples=fuzz.examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(health=HEALTH, models=MODELS, version=VERSION, status=st.sampled_from([200, 200, 404, 503]))
def test_any_json_from_a_peer_gives_each_probe_its_row(peer, rank, health, models, version, status):
    peer.status = status
    peer.answers = {"/health": health, "/v1/models": models, "/version": version}
    row, view = check_proxy("host-0", peer.url, 2, "token")
    assert isinstance(row.ok, bool) and row.detail and (view is None or isinstance(view, ProxyView))
    engine = check_engine(rank, "tiny", None, 2, view)
    assert isinstance(engine.ok, bool) and engine.detail
