"""What a proxy serves, from a deployment file or URLs: flow, port and policy, explicit flags winning, and the URL
decode instances call back in layerwise mode; contradictory or missing flags name the flag to fix."""

import textwrap

import pytest

from ascend_pd.errors import InputError
from ascend_pd.proxy.backend_choice import choose_backends

P, D = "http://127.0.0.1:8100", "http://127.0.0.1:8200"

DEPLOYMENT = textwrap.dedent("""
    apiVersion: ascend-pd/v1
    kind: Deployment
    metadata: {name: choice-test}
    cluster: local-cpu
    model: {name: tiny-llama-gqa, path: /models/tiny}
    connector: {implementation: vllm-ascend, mode: push, protocol: tcp}
    instances:
      - {name: prefill-0, role: prefill, devices: [{node: localhost-00, devices: [0]}], http_port: 8100,
         kv_port: 26000}
      - {name: decode-0, role: decode, devices: [{node: localhost-00, devices: [1]}], http_port: 8200,
         kv_port: 26100}
    proxy: {node: localhost-00, port: 9090, policy: round-robin}
""")


def deployment_file(tmp_path, text=DEPLOYMENT):
    path = tmp_path / "deployment.yaml"
    path.write_text(text)
    return str(path)


def test_a_layerwise_deployment_is_called_back_on_its_proxy_node_and_port(tmp_path):
    chosen = choose_backends(deployment_file(tmp_path))
    assert (chosen.mode, chosen.port, chosen.policy) == ("layerwise", 9090, "round-robin")
    assert [e.url for e in chosen.endpoints] == [P, D]
    # local-cpu's localhost-00 has host_ip 127.0.0.1: D calls that, not the wildcard the proxy listens on
    assert chosen.metaserver_url == "http://127.0.0.1:9090/v1/metaserver"


def test_flags_win_over_the_deployment(tmp_path):
    chosen = choose_backends(deployment_file(tmp_path), port=9191, policy="random",
                             advertise_url="http://10.1.2.3:9191/")
    assert (chosen.port, chosen.policy) == (9191, "random")
    assert chosen.metaserver_url == "http://10.1.2.3:9191/v1/metaserver"


def test_a_pull_deployment_has_no_metaserver(tmp_path):
    chosen = choose_backends(deployment_file(tmp_path, DEPLOYMENT.replace("mode: push", "mode: pull")))
    assert chosen.mode == "pull" and chosen.metaserver_url is None


def test_a_proxy_node_outside_the_cluster_names_the_field_and_line(tmp_path):
    text = DEPLOYMENT.replace("proxy: {node: localhost-00", "proxy: {node: elsewhere")
    with pytest.raises(InputError) as error:
        choose_backends(deployment_file(tmp_path, text))
    line = text.splitlines().index("proxy: {node: elsewhere, port: 9090, policy: round-robin}") + 1
    assert (error.value.field, error.value.line) == ("proxy.node", line)
    assert "--advertise-url" in error.value.fix


def test_mode_is_refused_with_a_deployment(tmp_path):
    with pytest.raises(InputError) as error:
        choose_backends(deployment_file(tmp_path), mode="pull")
    assert error.value.field == "--mode"


def test_urls_default_to_pull_on_port_8080_with_least_loaded():
    chosen = choose_backends(prefill=[P], decode=[D, "127.0.0.1:8201"])
    assert (chosen.mode, chosen.port, chosen.policy) == ("pull", 8080, "least-loaded")
    assert chosen.role_counts() == "1 prefill, 2 decode, 0 colocated"
    assert chosen.endpoints[-1].url == "http://127.0.0.1:8201"


def test_colocated_urls_alone_are_served_colocated_whatever_the_mode():
    assert choose_backends(colocated=[P], mode="layerwise").mode == "colocated"


def test_layerwise_urls_are_called_back_on_the_listening_address():
    chosen = choose_backends(prefill=[P], decode=[D], mode="layerwise", host="10.0.0.5", port=8300)
    assert chosen.metaserver_url == "http://10.0.0.5:8300/v1/metaserver"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_layerwise_on_a_wildcard_address_asks_for_an_advertised_url(host):
    with pytest.raises(InputError) as error:
        choose_backends(prefill=[P], decode=[D], mode="layerwise", host=host)
    assert error.value.field == "--advertise-url" and "--host" in error.value.fix


@pytest.mark.parametrize("flags,field", [({}, "--deployment"), ({"prefill": [P]}, "--decode"),
                                         ({"decode": [D]}, "--decode"),
                                         ({"deployment_file": "d.yaml", "decode": [D]}, "--deployment")])
def test_missing_or_contradictory_backends_name_the_flag(flags, field):
    with pytest.raises(InputError) as error:
        choose_backends(**flags)
    assert error.value.field == field and error.value.fix

