"""A node group may list its nodes by name and address instead of numbering them: they load as written, and a
name or address given twice, an unsafe name or a count that disagrees is refused with the field and line."""

import pytest
import yaml

from ascend_pd.errors import InputError
from ascend_pd.hardware import load_cluster
from ascend_pd.hardware.loader import _load_path

A2_TYPE = {"a2": {"chip": "910b3", "devices": 8}}
LINKS = {"hccs": {"bandwidth_gbytes_per_s": 56, "latency_us": 2, "tp_capable": True, "full_mesh": True},
         "roce": {"bandwidth_gbytes_per_s": 25, "latency_us": 10, "tp_capable": False}}


def cluster_file(tmp_path, *groups: dict):
    path = tmp_path / f"site-{len(list(tmp_path.iterdir()))}.yaml"  # a new path each time: loads are cached by path
    path.write_text(yaml.safe_dump({"name": "site", "node_types": A2_TYPE, "links": LINKS,
                                    "topology": {"node": "hccs", "cluster": "roce"}, "node_groups": list(groups),
                                    "protocols": ["ascend", "tcp"]}, sort_keys=False))
    return str(path)


def listed(*nodes: dict, **group) -> dict:
    return {"type": "a2", "interface": "bond0", **group, "nodes": list(nodes)}


def refusal(path: str) -> InputError:
    with pytest.raises(InputError) as info:
        _load_path(path)
    return info.value


def test_listed_nodes_keep_their_names_and_own_addresses(tmp_path):
    cluster = load_cluster(cluster_file(tmp_path, listed(
        {"name": "rack3-node7", "host_ip": "10.4.0.77", "device_ip_start": "10.40.0.1"},
        {"name": "spare", "host_ip": "172.16.9.2", "device_ip_start": "10.41.5.9", "interface": "eth2"})))
    assert [(n.name, n.host_ip, n.interface, n.index) for n in cluster.nodes] == [
        ("rack3-node7", "10.4.0.77", "bond0", 0), ("spare", "172.16.9.2", "eth2", 1)]
    assert [d.device_ip for d in cluster.node_devices("spare")] == [f"10.41.5.{9 + d}" for d in range(8)]
    assert cluster.device("rack3-node7", 7).device_ip == "10.40.0.8"
    assert cluster.device_count == 16


def test_device_addresses_listed_one_per_device_are_taken_in_order(tmp_path):
    # an A2 hccn.conf often puts each device in its own subnet: address_d = 192.168.<d>.8
    addresses = [f"192.168.{d}.8" for d in range(8)]
    cluster = load_cluster(cluster_file(tmp_path, listed({"name": "n1", "host_ip": "10.0.0.1",
                                                          "device_ips": addresses})))
    assert [d.device_ip for d in cluster.node_devices("n1")] == addresses


def test_a_count_beside_the_list_must_match_it(tmp_path):
    nodes = [{"name": "a", "host_ip": "10.0.0.1"}, {"name": "b", "host_ip": "10.0.0.9"}]
    assert len(load_cluster(cluster_file(tmp_path, listed(*nodes, count=2))).nodes) == 2
    error = refusal(cluster_file(tmp_path, listed(*nodes, count=3)))
    assert "count is 3" in error.message and error.field == "node_groups[0]"


def test_numbering_keys_are_refused_in_a_group_that_lists_its_nodes(tmp_path):
    error = refusal(cluster_file(tmp_path, listed({"name": "a", "host_ip": "10.0.0.1"}, host_ip_start="10.0.0.1")))
    assert "host_ip_start" in error.message and error.field == "node_groups[0]"


def test_a_group_without_a_list_still_needs_count_and_prefix(tmp_path):
    error = refusal(cluster_file(tmp_path, {"type": "a2", "count": 2}))
    assert "name_prefix" in error.message


def test_a_name_given_twice_names_the_second_entry(tmp_path):
    path = cluster_file(tmp_path, listed({"name": "n1", "host_ip": "10.0.0.1"}, {"name": "n1", "host_ip": "10.0.0.2"}))
    error = refusal(path)
    assert error.field == "node_groups[0].nodes[1].name" and "'n1'" in error.message
    assert error.file == path and error.line is not None


def test_a_listed_name_that_a_numbered_group_also_makes_is_refused(tmp_path):
    error = refusal(cluster_file(tmp_path, {"type": "a2", "count": 2, "name_prefix": "n", "host_ip_start": "10.9.0.1"},
                                 listed({"name": "n01", "host_ip": "10.0.0.1"})))
    assert error.field == "node_groups[1].nodes[0].name"


def test_a_host_address_given_twice_is_refused(tmp_path):
    error = refusal(cluster_file(tmp_path, listed({"name": "a", "host_ip": "10.0.0.1"},
                                                  {"name": "b", "host_ip": "10.0.0.1"})))
    assert error.field == "node_groups[0].nodes[1].host_ip"
    assert "10.0.0.1" in error.message and "'a'" in error.message and "'b'" in error.message


def test_overlapping_device_address_ranges_are_refused(tmp_path):
    # b's devices start where a's fourth device is
    error = refusal(cluster_file(tmp_path, listed(
        {"name": "a", "host_ip": "10.0.0.1", "device_ip_start": "10.1.0.1"},
        {"name": "b", "host_ip": "10.0.0.2", "device_ip_start": "10.1.0.4"})))
    assert error.field == "node_groups[0].nodes[1].device_ip_start" and "10.1.0.4" in error.message


def test_a_listed_device_address_list_of_the_wrong_length_is_refused(tmp_path):
    error = refusal(cluster_file(tmp_path, listed({"name": "a", "host_ip": "10.0.0.1",
                                                   "device_ips": ["10.1.0.1", "10.1.0.2"]})))
    assert error.field == "node_groups[0].nodes[0].device_ips" and "8 devices" in error.message


@pytest.mark.parametrize("name", ["node 1", "a/b", "-lead", "x" * 64])
def test_a_name_render_could_not_write_is_refused(tmp_path, name):
    error = refusal(cluster_file(tmp_path, listed({"name": name, "host_ip": "10.0.0.1"})))
    assert error.field == "node_groups[0].nodes[0].name"


def test_a_malformed_address_names_its_field(tmp_path):
    error = refusal(cluster_file(tmp_path, listed({"name": "a", "host_ip": "10.0.0.300"})))
    assert error.field == "node_groups[0].nodes[0].host_ip"


def test_one_node_listing_a_device_address_twice_is_refused(tmp_path):
    addresses = [f"10.1.0.{d}" for d in (1, 2, 3, 4, 5, 6, 7, 1)]
    error = refusal(cluster_file(tmp_path, listed({"name": "a", "host_ip": "10.0.0.1", "device_ips": addresses})))
    assert error.field == "node_groups[0].nodes[0].device_ips" and "10.1.0.1" in error.message
