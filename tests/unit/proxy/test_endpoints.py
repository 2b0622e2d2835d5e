"""Backends read from deployment.yaml: one endpoint per DP rank at http_port + rank on the leader's host_ip."""

import textwrap

import pytest

from ascend_pd.deploy import parse_deployment
from ascend_pd.errors import InputError
from ascend_pd.proxy.endpoints import endpoint_from_url, endpoints_from_deployment
from ascend_pd.proxy.settings import mode_for

DEPLOYMENT = textwrap.dedent("""
    apiVersion: ascend-pd/v1
    kind: Deployment
    metadata: {name: dp-test}
    cluster: local-cpu
    model: {name: tiny-llama-gqa, path: /models/tiny}
    connector: {implementation: ascend-pd, mode: push, protocol: tcp}
    instances:
      - name: prefill-0
        role: prefill
        parallel: {tp: 1, dp: 2}
        devices: [{node: localhost-00, devices: [0]}, {node: localhost-00, devices: [1]}]
        http_port: 8100
        kv_port: 26000
      - name: decode-0
        role: decode
        devices: [{node: localhost-00, devices: [2]}]
        http_port: 8200
        kv_port: 26100
        engine_id: dec
    proxy: {node: localhost-00, port: 8080}
""")


def test_each_dp_rank_is_its_own_endpoint():
    endpoints = endpoints_from_deployment(parse_deployment(DEPLOYMENT))
    assert [(e.role, e.url, e.dp_rank) for e in endpoints] == [
        ("prefill", "http://127.0.0.1:8100", 0), ("prefill", "http://127.0.0.1:8101", 1),
        ("decode", "http://127.0.0.1:8200", 0)]


def test_kv_side_channel_of_a_dp_rank_starts_at_kv_port_plus_rank_times_tp():
    prefill_rank1 = endpoints_from_deployment(parse_deployment(DEPLOYMENT))[1]
    assert (prefill_rank1.kv.host, prefill_rank1.kv.port, prefill_rank1.kv.engine_id) == ("127.0.0.1", 26001,
                                                                                         "prefill-0")


@pytest.mark.parametrize("implementation,mode,flow", [("ascend-pd", "push", "push"), ("ascend-pd", "pull", "pull"),
                                                      ("vllm-ascend", "push", "layerwise"),
                                                      ("vllm-ascend", "pull", "pull")])
def test_flow_follows_the_connector_settings(implementation, mode, flow):
    text = DEPLOYMENT.replace("implementation: ascend-pd, mode: push", f"implementation: {implementation}, "
                                                                       f"mode: {mode}")
    assert mode_for(parse_deployment(text).deployment) == flow


def test_a_deployment_without_prefill_is_served_colocated():
    text = DEPLOYMENT.replace("role: prefill", "role: colocated").replace("role: decode", "role: colocated")
    assert mode_for(parse_deployment(text).deployment) == "colocated"


def test_a_bad_url_names_the_flag_and_the_fix():
    with pytest.raises(InputError) as error:
        endpoint_from_url("localhost", "decode", "--decode")
    assert error.value.field == "--decode" and "http://" in error.value.fix
