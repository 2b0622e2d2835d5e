"""A cluster that mixes chips loads, names its chips, splits into one group per chip, and refuses to be priced as one
chip."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.hardware import load_cluster
from ascend_pd.hardware.platform import nodes_platform
from tests.mixed_chips import write_clusters


@pytest.fixture
def mixed(tmp_path):
    return load_cluster(write_clusters(tmp_path)["mixed"])


def test_a_mixed_cluster_names_each_chip_once_in_node_order(mixed):
    assert [chip.id for chip in mixed.chips] == ["910b3", "910c"]
    assert [chip.id for chip in mixed.chips_of(["c-00", "b-00", "c-00", "nowhere"])] == ["910c", "910b3"]


def test_asking_a_mixed_cluster_for_its_one_chip_is_an_error_naming_both(mixed):
    with pytest.raises(InputError) as caught:
        mixed.chip
    assert "910b3 nodes (type a2) and 910c nodes (type a3)" in caught.value.message
    assert caught.value.field == "node_types" and caught.value.file == mixed.source


def test_each_chip_group_holds_only_its_nodes_with_the_clusters_links(mixed):
    b, c = mixed.chip_groups["910b3"], mixed.chip_groups["910c"]
    assert [n.name for n in b.nodes] == ["b-00"] and b.device_count == 8 and b.chip.id == "910b3"
    assert [n.name for n in c.nodes] == ["c-00"] and c.device_count == 16 and c.chip.id == "910c"
    assert b.links == mixed.links and c.topology == mixed.topology and c.name == mixed.name
    assert c.devices_per_node == 16 and b.devices_per_node == 8


def test_a_cluster_of_one_chip_is_its_own_only_group():
    cluster = load_cluster("atlas-800i-a2-x4")
    assert cluster.chip_groups == {"910b3": cluster} and cluster.chip.id == "910b3"


def test_launch_files_are_written_for_the_one_platform_of_the_nodes_a_deployment_uses(mixed):
    assert nodes_platform(mixed, ["c-00"]) == "a3"
    assert nodes_platform(mixed, ["b-00"]) == "a2"
    with pytest.raises(InputError) as caught:
        nodes_platform(mixed, ["b-00", "c-00"], "deployment.yaml")
    assert "A2 and A3" in caught.value.message and caught.value.field == "instances"
