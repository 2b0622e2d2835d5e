"""HCCL rank tables: standard fields, ranks in order, device IPs and SuperPoD ids as the cluster file numbers them."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.render import rank_table

from .conftest import loaded_from


def table_for(data, instance_name):
    loaded = loaded_from(data)
    instance = next(i for i in loaded.deployment.instances if i.name == instance_name)
    return rank_table(loaded.cluster(), instance)


def test_superpod_instance_gets_version_1_2_with_super_device_ids(cm384_example):
    """cloudmatrix384 numbers hosts from 192.168.16.11 and device IPs from 192.168.128.1, 16 devices per node:
    cm0-n01 (node 1) holds device IPs .17 to .32 and super_device_ids 16 to 31."""
    table = table_for(cm384_example, "prefill-1")
    assert table["version"] == "1.2" and table["status"] == "completed" and table["server_count"] == "1"
    server, = table["server_list"]
    assert server["server_id"] == "192.168.16.12"
    assert [d["rank_id"] for d in server["device"]] == [str(r) for r in range(16)]
    assert [d["device_id"] for d in server["device"]] == [str(d) for d in range(16)]
    assert [d["device_ip"] for d in server["device"]] == [f"192.168.128.{17 + d}" for d in range(16)]
    assert [d["super_device_id"] for d in server["device"]] == [str(16 + d) for d in range(16)]
    assert table["super_pod_list"] == [{"super_pod_id": "0", "server_list": [{"server_id": "192.168.16.12"}]}]


def test_instance_over_two_nodes_lists_both_servers_and_continues_rank_ids(cm384_example):
    table = table_for(cm384_example, "decode-0")
    assert table["server_count"] == "2"
    first, second = table["server_list"]
    assert (first["server_id"], second["server_id"]) == ("192.168.16.13", "192.168.16.14")
    assert [d["rank_id"] for d in second["device"]] == [str(r) for r in range(16, 32)]


def test_a2_instance_gets_version_1_0_without_superpod_fields(a2_example):
    """atlas-800i-a2-x4: 8 devices per node from 192.168.100.1, so a2-02's devices are .17 to .24."""
    table = table_for(a2_example, "decode-0")
    assert table["version"] == "1.0" and "super_pod_list" not in table
    server, = table["server_list"]
    assert [d["device_ip"] for d in server["device"]] == [f"192.168.100.{17 + d}" for d in range(8)]
    assert all("super_device_id" not in d for d in server["device"])


def test_a_cluster_without_device_ips_cannot_have_a_rank_table(cpu_example):
    with pytest.raises(InputError, match="device IPs"):
        table_for(cpu_example, "prefill-0")


def test_a_node_address_of_the_deployment_is_the_server_id(a2_example):
    a2_example["node_addresses"] = {"a2-00": "10.1.1.1"}
    loaded = loaded_from(a2_example)
    table = rank_table(loaded.cluster(), loaded.deployment.instances[0])
    assert table["server_list"][0]["server_id"] == "10.1.1.1"
