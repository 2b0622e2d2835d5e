"""The process layout: devices, ports, engine ids, DP flags and environment of every engine."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from ascend_pd.errors import InputError

from .conftest import EXAMPLE_NAMES, bundle_of, example_data, loaded_from, plan_of


def by_name(plan):
    return {p.name: p for p in plan.processes()}


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_dense_dp_ranks_are_independent_engines_with_their_own_ids_and_ports(a2_example):
    """Qwen3-32B is dense: vLLM refuses external DP for it, so each rank is an engine of its own whose engine_id
    and kv_port already carry the rank (28200 + 1 * tp 4 = 28204)."""
    processes = by_name(plan_of(a2_example))
    rank0, rank1 = processes["decode-0-dp0"], processes["decode-0-dp1"]
    assert (rank0.node, rank0.devices, rank0.http_port) == ("a2-02", (0, 1, 2, 3), 8100)
    assert (rank1.node, rank1.devices, rank1.http_port) == ("a2-02", (4, 5, 6, 7), 8101)
    assert (rank0.engine_id, rank0.kv_port) == ("decode-0_dp0", 28200)
    assert (rank1.engine_id, rank1.kv_port) == ("decode-0_dp1", 28204)
    assert not any(a.startswith("--data-parallel") for a in rank1.argv)
    assert json.loads(flag(rank1.argv, "--kv-transfer-config"))["engine_id"] == "decode-0_dp1"


def test_moe_dp_ranks_join_one_dp_group_led_by_rank_zeros_host(a3_example):
    """DeepSeek-R1 is MoE: decode-0's 32 ranks are one vLLM DP group; rank 17 is device 1 of a3-03 and reaches
    the coordinator on a3-02 (192.168.2.11 + 2), port 8100 + 10000."""
    process = by_name(plan_of(a3_example))["decode-0-dp17"]
    assert (process.node, process.devices, process.http_port) == ("a3-03", (1,), 8117)
    argv = process.argv
    assert flag(argv, "--data-parallel-size") == "32"
    assert flag(argv, "--data-parallel-rank") == "17"
    assert flag(argv, "--data-parallel-address") == "192.168.2.13"
    assert flag(argv, "--data-parallel-rpc-port") == "18100"
    assert "--enable-expert-parallel" in argv
    assert json.loads(flag(argv, "--kv-transfer-config"))["engine_id"] == "decode-0"  # vLLM appends _dp17
    assert (process.engine_id, process.kv_port) == ("decode-0_dp17", 36117)


def test_ascend_processes_see_only_their_devices_and_use_vllm_serve(a3_example):
    process = by_name(plan_of(a3_example))["prefill-1-dp1"]
    env = dict(process.env)
    assert env["ASCEND_RT_VISIBLE_DEVICES"] == "8,9,10,11,12,13,14,15"
    assert env["HCCL_BUFFSIZE"] == "256"
    assert process.argv[:3] == ("vllm", "serve", "/models/DeepSeek-R1-W8A8")
    assert flag(process.argv, "--tensor-parallel-size") == "8"
    assert flag(process.argv, "--quantization") == "ascend"
    assert flag(process.argv, "--served-model-name") == "deepseek-r1"


def test_node_environment_comes_from_the_cluster_config(a3_example):
    env = dict(plan_of(a3_example).node("a3-01").env)
    # atlas-800t-a3-x4 numbers its hosts from 192.168.2.11 on enp189s0f0
    assert env["HCCL_IF_IP"] == env["VLLM_HOST_IP"] == "192.168.2.12"
    assert env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == env["HCCL_SOCKET_IFNAME"] == "enp189s0f0"


def test_interface_flag_and_node_addresses_override_the_cluster_config(a3_example):
    a3_example["node_addresses"] = {"a3-02": "10.9.0.2"}
    plan = plan_of(a3_example, interface="bond0")
    env = dict(plan.node("a3-02").env)
    assert (env["HCCL_IF_IP"], env["HCCL_SOCKET_IFNAME"]) == ("10.9.0.2", "bond0")
    rank20 = by_name(plan)["decode-0-dp20"]
    assert flag(rank20.argv, "--data-parallel-address") == "10.9.0.2"


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_each_engine_serves_http_at_the_address_the_proxy_reaches_it_at_and_nothing_listens_everywhere(name):
    from ascend_pd.proxy.endpoints import endpoints_from_deployment

    data = example_data(name)
    data["node_addresses"] = {data["instances"][0]["devices"][0]["node"]: "10.9.0.2"}  # not the cluster file's
    plan = plan_of(data)
    serving = {f"http://{flag(p.argv, '--host')}:{flag(p.argv, '--port')}" for p in plan.processes() if p.http_port}
    assert serving == {e.url for e in endpoints_from_deployment(loaded_from(data))}
    assert any("10.9.0.2" in url for url in serving)
    assert not any("0.0.0.0" in text for text in bundle_of(name).files.values())


def test_unknown_node_in_node_addresses_is_an_input_error(a3_example):
    a3_example["node_addresses"] = {"a3-09": "10.0.0.1"}
    with pytest.raises(InputError, match="a3-09") as raised:
        plan_of(a3_example)
    assert raised.value.field == "node_addresses.a3-09" and "ascend-pd show cluster" in raised.value.fix


def test_a2_nodes_enable_intra_roce_only_when_p_and_d_share_a_node(a2_example):
    plan = plan_of(a2_example)
    assert all("HCCL_INTRA_ROCE_ENABLE" not in dict(n.env) for n in plan.nodes)
    prefill, decode = a2_example["instances"][0], a2_example["instances"][4]
    decode["parallel"]["dp"] = 1
    decode["devices"] = [{"node": "a2-00", "devices": [4, 5, 6, 7]}]
    a2_example["instances"] = [prefill, decode]
    shared = plan_of(a2_example).node("a2-00")
    assert dict(shared.env)["HCCL_INTRA_ROCE_ENABLE"] == "1"


def test_cpu_engines_use_the_module_entry_point_one_core_per_rank_and_no_ascend_env(cpu_example):
    cpu_example["instances"][1]["parallel"]["tp"] = 2
    cpu_example["instances"][1]["devices"] = [{"node": "localhost-00", "devices": [2, 3]}]
    plan = plan_of(cpu_example)
    decode = by_name(plan)["decode-0-dp0"]
    assert decode.argv[:5] == ("python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                               "models/tiny-llama-gqa")
    assert {k: str(v) for k, v in decode.env} == {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "2|3"}
    # a one-worker engine runs its worker in the EngineCore process, where vLLM binds no cores
    assert {k: str(v) for k, v in by_name(plan)["prefill-0-dp0"].env} == {"VLLM_CPU_KVCACHE_SPACE": "1",
                                                                          "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                                                                          "OMP_NUM_THREADS": "1"}
    node_env = dict(plan.node("localhost-00").env)
    assert node_env == {"VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    assert "--additional-config" not in decode.argv and "--quantization" not in decode.argv


def test_a_moe_dp_rank_spread_over_nodes_is_refused_with_the_field(cm384_example):
    prefill = cm384_example["instances"][0]
    prefill["devices"] = [{"node": "cm0-n00", "devices": [0, 1, 2, 3], "dp_rank": 0},
                          {"node": "cm0-n04", "devices": [0, 1, 2, 3], "dp_rank": 0},
                          {"node": "cm0-n00", "devices": list(range(8, 16)), "dp_rank": 1}]
    with pytest.raises(InputError) as caught:
        plan_of(cm384_example)
    assert caught.value.field == "instances[0].devices"
    assert "MoE" in caught.value.message


def test_a_dp_coordinator_port_taken_by_another_endpoint_is_refused(a3_example):
    """decode-0 coordinates its DP group on 8100 + 10000 = 18100 on a3-02; a proxy there on 18100 blocks it."""
    a3_example["proxy"] = {"node": "a3-02", "port": 18100}
    with pytest.raises(InputError) as caught:
        plan_of(a3_example)
    assert "18100" in caught.value.message and caught.value.field == "instances[2].http_port"


def spread_tp_deployment():
    return yaml.safe_load((Path(__file__).with_name("spread-tp-qwen3.yaml")).read_text())


def test_a_rank_spread_over_nodes_runs_a_serving_head_and_a_headless_part():
    processes = by_name(plan_of(spread_tp_deployment()))
    head, part = processes["prefill-0-dp0"], processes["prefill-0-dp0-node1"]
    assert (head.node, head.http_port, head.kv_port) == ("cm0-n00", 8000, 36000)
    # TP ranks 4-7 live on cm0-n01 and bind kv_port + 4 .. kv_port + 7 there
    assert (part.node, part.http_port, part.kv_port, part.first_worker) == ("cm0-n01", None, 36004, 4)
    for process, node_rank in ((head, "0"), (part, "1")):
        assert flag(process.argv, "--nnodes") == "2"
        assert flag(process.argv, "--node-rank") == node_rank
        assert flag(process.argv, "--master-addr") == "192.168.16.11"  # cm0-n00
        assert flag(process.argv, "--master-port") == str(8000 + 11000)
    assert "--headless" in part.argv and "--headless" not in head.argv
    assert dict(part.env)["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"


def test_a_prefill_rank_spread_over_nodes_tells_its_connector_each_tp_ranks_host():
    """D reaches P's TP ranks 4-7 on cm0-n01, not at the scheduler's host on cm0-n00 (pull: P hands these over
    with its blocks; push: the proxy reads the same hosts from deployment.yaml)."""
    from ascend_pd.connector.config import parse_config
    from ascend_pd.deploy import parse_deployment
    from ascend_pd.proxy.endpoints import endpoints_from_deployment

    data = spread_tp_deployment()
    head = by_name(plan_of(data))["prefill-0-dp0"]
    kv = head.kv_config
    config = parse_config(kv["kv_role"], kv["engine_id"], kv["kv_port"], kv["kv_connector_extra_config"])
    n00, n01 = "192.168.16.11", flag(by_name(plan_of(data))["prefill-0-dp0-node1"].argv, "--master-addr")
    assert n00 == n01  # the headless part meets its head on cm0-n00
    assert config.rank_hosts[:4] == (n00,) * 4 and len(set(config.rank_hosts[4:])) == 1
    assert config.rank_hosts[4] != n00
    prefill = next(e for e in endpoints_from_deployment(parse_deployment(yaml.safe_dump(data), "spread.yaml"))
                   if e.role == "prefill")
    assert prefill.kv.rank_hosts == config.rank_hosts
    decode = by_name(plan_of(data))["decode-0-dp0"].kv_config
    assert "rank_hosts" not in decode["kv_connector_extra_config"]


def test_an_uneven_spread_is_refused():
    data = spread_tp_deployment()
    data["instances"][0]["devices"] = [{"node": "cm0-n00", "devices": [0, 1, 2, 3, 4, 5], "dp_rank": 0},
                                       {"node": "cm0-n01", "devices": [0, 1], "dp_rank": 0}]
    with pytest.raises(InputError, match="unevenly"):
        plan_of(data)


@pytest.mark.parametrize("host_cores,expected", [(4, "2|3"), (8, "2|3"), (3, "nobind"), (2, "nobind")])
def test_cpu_launcher_binds_device_cores_only_when_the_host_has_a_core_for_every_device(cpu_example, host_cores,
                                                                                      expected):
    from ascend_pd.render import RenderOptions, render_bundle

    from .conftest import loaded_from

    cpu_example["instances"][1]["parallel"]["tp"] = 2
    cpu_example["instances"][1]["devices"] = [{"node": "localhost-00", "devices": [2, 3]}]
    script = render_bundle(loaded_from(cpu_example), RenderOptions(target="bash")).files["launch-localhost-00.sh"]
    function = script[script.index("cpu_cores() {"):script.index("\n}\n", script.index("cpu_cores() {")) + 3]
    assert 'VLLM_CPU_OMP_THREADS_BIND="$(cpu_cores 2 3)"' in script
    # nproc as a shell function stands in for a host with `host_cores` cores
    used = script[script.index("NODE_CPU_DEVICES="):].split()[0]
    shell = f"nproc() {{ echo {host_cores}; }}\n{used}\n{function}\ncpu_cores 2 3"
    assert subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True).stdout.strip() == expected
