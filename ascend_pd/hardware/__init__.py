"""Hardware as data: chips, nodes, SuperPoDs and link tiers, loaded from superpod_configs/clusters/."""

from ascend_pd.hardware.chips import Chip, chip_catalog, get_chip
from ascend_pd.hardware.cluster import Cluster, Device, LinkTier, Node
from ascend_pd.hardware.loader import DEFAULT_CLUSTER, configs_dir, load_cluster, shipped_clusters

__all__ = ["Chip", "Cluster", "DEFAULT_CLUSTER", "Device", "LinkTier", "Node", "chip_catalog", "configs_dir",
           "get_chip", "load_cluster", "shipped_clusters"]
