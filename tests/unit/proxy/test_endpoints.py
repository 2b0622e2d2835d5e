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


def test_the_kv_workers_of_an_instance_tile_its_port_range():
    # TP2 x DP2: worker r of DP rank d listens on the port handed to D for d, plus r. The four workers must take
    # kv_port .. kv_port + 3, each its own; starting rank d at kv_port + d would put two workers on one port.
    text = DEPLOYMENT.replace("parallel: {tp: 1, dp: 2}", "parallel: {tp: 2, dp: 2}").replace(
        "[{node: localhost-00, devices: [0]}, {node: localhost-00, devices: [1]}]",
        "[{node: localhost-00, devices: [0, 1]}, {node: localhost-00, devices: [2, 3]}]")
    prefill = [e for e in endpoints_from_deployment(parse_deployment(text)) if e.role == "prefill"]
    worker_ports = [e.kv.port + tp_rank for e in prefill for tp_rank in range(e.kv.tp_size)]
    assert sorted(worker_ports) == [26000, 26001, 26002, 26003]
    # a dense model's DP ranks are engines of their own, each named as render configures it
    assert [(e.kv.host, e.kv.engine_id, e.kv.dp_rank) for e in prefill] == [("127.0.0.1", "prefill-0_dp0", 0),
                                                                             ("127.0.0.1", "prefill-0_dp1", 1)]


@pytest.mark.parametrize("implementation,mode,flow", [("ascend-pd", "push", "push"), ("ascend-pd", "pull", "pull"),
                                                      ("vllm-ascend", "push", "layerwise"),
                                                      ("vllm-ascend", "pull", "pull")])
def test_flow_follows_the_connector_settings(implementation, mode, flow):
    text = DEPLOYMENT.replace("implementation: ascend-pd, mode: push", f"implementation: {implementation}, "
                                                                       f"mode: {mode}")
    assert mode_for(parse_deployment(text).deployment) == flow


def test_a_colocated_deployment_runs_its_connectors_flow_so_a_prefill_and_decode_can_join_later():
    # the proxy serves colocated instances while no P/D pair is up (tests/integration/proxy/test_admin.py)
    text = DEPLOYMENT.replace("role: prefill", "role: colocated").replace("role: decode", "role: colocated")
    assert mode_for(parse_deployment(text).deployment) == "push"


def test_a_bad_url_names_the_flag_and_the_fix():
    with pytest.raises(InputError) as error:
        endpoint_from_url("localhost", "decode", "--decode")
    assert error.value.field == "--decode" and "http://" in error.value.fix


@pytest.mark.parametrize("url", ["https://10.0.0.1:8000", "http://10.0.0.1:8000/v1", "http://user:pw@10.0.0.1:8000"])
def test_a_backend_flag_the_proxy_could_not_call_as_given_is_refused_at_start(url):
    """The proxy calls backends over plain HTTP at the address alone: an https:// backend was accepted and then
    failed every request routed to it."""
    with pytest.raises(InputError) as error:
        endpoint_from_url(url, "decode", "--decode")
    assert error.value.field == "--decode"


def test_a_backend_flag_is_named_as_the_table_names_it():
    assert endpoint_from_url("10.0.0.1:8000", "prefill", "--prefill").url == "http://10.0.0.1:8000"
    assert endpoint_from_url("http://[fd00::1]:8000/", "prefill", "--prefill").url == "http://[fd00::1]:8000"
