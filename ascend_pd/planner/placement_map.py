"""The placement map `plan` writes beside its Pareto plot: which device of which node runs which instance and role."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ascend_pd.deploy.schema import Deployment
from ascend_pd.hardware import Cluster

ROLE_COLORS = {"prefill": (0.12, 0.47, 0.71), "decode": (1.0, 0.5, 0.05), "colocated": (0.17, 0.63, 0.17)}
UNUSED_COLOR = (0.88, 0.88, 0.88)
LABELLED_CELLS_MAX = 1024  # beyond this many devices the rows are too thin to carry a label
NODE_TICKS_MAX = 64  # beyond this many nodes only some rows are named


@dataclass(frozen=True)
class Owner:
    """What runs on one device: the instance, its role, which of the role's instances it is, and the DP rank."""

    instance: str
    role: str
    index_in_role: int
    dp_rank: int

    def label(self) -> str:
        """'P0', 'D3', or 'P0.2' for DP rank 2 of an instance with several."""
        return f"{self.role[0].upper()}{self.index_in_role}" + (f".{self.dp_rank}" if self.dp_rank else "")


def device_owners(deployment: Deployment) -> dict[tuple[str, int], Owner]:
    """(node, device id on the node) -> what runs there, for every device the deployment's instances list."""
    owners: dict[tuple[str, int], Owner] = {}
    in_role: dict[str, int] = {}
    for instance in deployment.instances:
        index = in_role.get(instance.role, 0)
        in_role[instance.role] = index + 1
        for rank, group in enumerate(instance.rank_groups()):
            for placement in group:
                for device in placement.devices:
                    owners[(placement.node, device)] = Owner(instance.name, instance.role, index, rank)
    return owners


def _blocks(owners: dict[tuple[str, int], Owner]) -> dict[tuple[str, Owner], list[int]]:
    """The devices each DP rank holds on each node: one label per block, not one per device."""
    blocks: dict[tuple[str, Owner], list[int]] = {}
    for (node, column), owner in owners.items():
        blocks.setdefault((node, owner), []).append(column)
    return blocks


def _shade(color: tuple[float, float, float], index: int) -> tuple[float, float, float]:
    """Neighbouring instances of one role alternate between the role's colour and a lighter one."""
    lift = 0.35 if index % 2 else 0.0
    return tuple(c + (1 - c) * lift for c in color)


def write_placement_png(deployment: Deployment, cluster: Cluster, title: str, path: Path) -> None:
    """One row per node of `cluster`, one cell per device, coloured by the role of the instance that runs there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch

    owners = device_owners(deployment)
    nodes = [node.name for node in cluster.nodes]
    columns = cluster.devices_per_node
    image = np.ones((len(nodes), columns, 3))
    for row, node in enumerate(nodes):
        for column in range(columns):
            owner = owners.get((node, column))
            image[row, column] = _shade(ROLE_COLORS[owner.role], owner.index_in_role) if owner else UNUSED_COLOR

    height = min(16.0, 1.2 + 0.24 * len(nodes))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * columns + 2), height), dpi=100)
    ax.imshow(image, aspect="auto", interpolation="nearest")
    if len(nodes) * columns <= LABELLED_CELLS_MAX:
        row_of = {node: row for row, node in enumerate(nodes)}
        for (node, owner), device_columns in _blocks(owners).items():
            if node in row_of:
                ax.text(sum(device_columns) / len(device_columns), row_of[node], owner.label(), ha="center",
                        va="center", fontsize=6)
    step = max(1, len(nodes) // NODE_TICKS_MAX)
    ax.set_yticks(range(0, len(nodes), step), nodes[::step], fontsize=7)
    ax.set_xticks(range(columns), [str(c) for c in range(columns)], fontsize=7)
    ax.set_xlabel("device on the node")
    ax.set_title(title, fontsize=10)
    roles = [role for role in ROLE_COLORS if any(owner.role == role for owner in owners.values())]
    ax.legend(handles=[Patch(color=ROLE_COLORS[r], label=r) for r in roles] + [Patch(color=UNUSED_COLOR,
              label="unused")], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
