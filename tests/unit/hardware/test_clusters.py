"""Shipped clusters load with the topology the vendor documents, and the topology queries answer as it says."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.hardware import load_cluster, shipped_clusters
from ascend_pd.hardware.loader import _load_path

REQUIRED = {"atlas-800i-a2-x4", "atlas-800t-a3-x4", "cloudmatrix384", "cloudmatrix384-x2", "local-cpu"}


def test_every_required_cluster_is_shipped():
    assert REQUIRED <= set(shipped_clusters())


def test_default_cluster_is_one_full_cloudmatrix384():
    cluster = load_cluster()
    assert cluster.name == "cloudmatrix384"
    assert len(cluster.nodes) == 48
    packages = {(d.node, d.package) for d in cluster.devices}
    assert len(packages) == 384
    assert cluster.device_count == 768
    assert cluster.superpods == (0,)


def test_cloudmatrix_x2_has_two_superpods_of_768_devices():
    cluster = load_cluster("cloudmatrix384-x2")
    for pod in (0, 1):
        assert sum(1 for d in cluster.devices if d.superpod == pod) == 768
    # super device ids are unique inside each SuperPoD
    for pod in (0, 1):
        ids = [d.super_device_id for d in cluster.devices if d.superpod == pod]
        assert sorted(ids) == list(range(768))


def test_a3_link_tiers_follow_sio_hccs_ub_roce():
    cluster = load_cluster("cloudmatrix384-x2")
    a = cluster.device("cm0-n00", 0)
    assert cluster.link_between(a, cluster.device("cm0-n00", 1)).name == "sio"  # same package
    assert cluster.link_between(a, cluster.device("cm0-n00", 2)).name == "hccs-l1"  # next HiAM module
    assert cluster.link_between(a, cluster.device("cm0-n05", 0)).name == "ub"  # same SuperPoD
    assert cluster.link_between(a, cluster.device("cm1-n00", 0)).name == "roce"  # other SuperPoD
    assert cluster.link_between(a, a) is None


def test_a2_tp_only_inside_a_node():
    cluster = load_cluster("atlas-800i-a2-x4")
    one_node = [cluster.device("a2-00", i) for i in range(8)]
    assert cluster.tp_group_problem(one_node) is None
    two_nodes = one_node[:4] + [cluster.device("a2-01", i) for i in range(4)]
    assert "roce" in cluster.tp_group_problem(two_nodes)


def test_a3_tp_inside_superpod_but_not_across():
    cluster = load_cluster("cloudmatrix384-x2")
    across_nodes = [cluster.device("cm0-n00", i) for i in range(16)] + [cluster.device("cm0-n01", i) for i in range(16)]
    assert cluster.tp_group_problem(across_nodes) is None
    across_pods = [cluster.device("cm0-n00", 0), cluster.device("cm1-n00", 0)]
    assert cluster.tp_group_problem(across_pods) is not None


def test_standalone_a3_nodes_cannot_share_a_tp_group():
    cluster = load_cluster("atlas-800t-a3-x4")
    assert cluster.tp_group_problem([cluster.device("a3-00", 0), cluster.device("a3-01", 0)]) is not None


def test_910c_device_figures_are_half_a_package():
    # CloudMatrix384 paper: 752 TFLOPS BF16, 128 GB and 3.2 TB/s per 910C package (two dies).
    chip = load_cluster().chip
    assert chip.dies_per_package == 2
    assert chip.bf16_flops * 2 == pytest.approx(752e12)
    assert chip.hbm_bytes * 2 == 128 * 1024**3
    assert chip.hbm_bandwidth * 2 == pytest.approx(3.2e12)


def test_free_devices_excludes_used_ones():
    cluster = load_cluster("atlas-800i-a2-x4")
    assert cluster.free_devices("a2-01", [0, 1, 7]) == [2, 3, 4, 5, 6]


def test_ephemeral_range_scales_with_devices_per_node():
    assert load_cluster("atlas-800i-a2-x4").ephemeral_port_range() == (20000, 28000)
    assert load_cluster("cloudmatrix384").ephemeral_port_range() == (20000, 36000)


def test_unknown_cluster_name_lists_shipped_ones():
    with pytest.raises(InputError) as info:
        load_cluster("cloudmatrix999")
    assert "cloudmatrix384" in info.value.fix


def test_cluster_file_with_unknown_link_names_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("""\
name: bad
node_types: {n: {chip: 910b3, devices: 8}}
links: {hccs: {bandwidth_gbytes_per_s: 56, latency_us: 2, tp_capable: true}}
topology: {node: hccs, cluster: roce}
node_groups: [{type: n, count: 2, name_prefix: x-}]
protocols: [ascend]
""")
    with pytest.raises(InputError) as info:
        _load_path(str(path))
    assert "roce" in str(info.value) and str(path) in str(info.value)


def test_cluster_file_with_unknown_chip_names_the_node_type(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("""\
name: bad
node_types: {n: {chip: 910z, devices: 8}}
links: {hccs: {bandwidth_gbytes_per_s: 56, latency_us: 2, tp_capable: true}}
topology: {node: hccs, cluster: hccs}
node_groups: [{type: n, count: 1, name_prefix: x-}]
protocols: [ascend]
""")
    with pytest.raises(InputError) as info:
        _load_path(str(path))
    assert info.value.field == "node_types.n.chip"


def test_generated_nodes_take_consecutive_addresses_from_their_groups_starts():
    """What the shipped file writes (four A2 nodes of 8 devices from 192.168.1.11 and 192.168.100.1), as an operator
    reads it: node i at host_ip_start + i, its device d at device_ip_start + 8 i + d."""
    cluster = load_cluster("atlas-800i-a2-x4")
    assert [node.host_ip for node in cluster.nodes] == ["192.168.1.11", "192.168.1.12", "192.168.1.13",
                                                        "192.168.1.14"]
    third = [device.device_ip for device in cluster.devices if device.node == cluster.nodes[2].name]
    assert third == [f"192.168.100.{17 + d}" for d in range(8)]
