"""HCCL rank tables in the standard JSON format: one per instance, ranks in DP-rank then TP-rank order."""

from __future__ import annotations

from typing import Any

from ascend_pd.deploy import Instance
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster


def rank_table(cluster: Cluster, instance: Instance) -> dict[str, Any]:
    """The rank table of one instance. Inside a SuperPoD (A3) it is version 1.2, with super_device_id per device
    and super_pod_list; elsewhere version 1.0. HCCL wants every value as a string."""
    servers: dict[str, list[dict[str, str]]] = {}
    superpod_of: dict[str, int | None] = {}
    rank = 0
    for group in instance.rank_groups():
        for placement in group:
            node = cluster.node(placement.node)
            server_id = node.host_ip
            superpod_of[server_id] = node.superpod
            for local_id in placement.devices:
                device = cluster.device(node.name, local_id)
                if device.device_ip is None:
                    raise InputError(f"cluster '{cluster.name}' gives node '{node.name}' no device IPs, which a rank "
                                     "table needs", file=cluster.source, field="node_groups[].device_ip_start",
                                     fix="set device_ip_start for the node group (the addresses in /etc/hccn.conf)")
                entry = {"device_id": str(local_id), "device_ip": device.device_ip}
                if device.super_device_id is not None:
                    entry["super_device_id"] = str(device.super_device_id)
                entry["rank_id"] = str(rank)
                rank += 1
                servers.setdefault(server_id, []).append(entry)
    in_superpod = all(pod is not None for pod in superpod_of.values())
    table: dict[str, Any] = {
        "version": "1.2" if in_superpod else "1.0",
        "server_count": str(len(servers)),
        "server_list": [{"server_id": server, "device": devices, "host_nic_ip": "reserve"}
                        for server, devices in servers.items()],
        "status": "completed",
    }
    if in_superpod:
        pods: dict[int, list[str]] = {}
        for server, pod in superpod_of.items():
            pods.setdefault(pod, []).append(server)  # type: ignore[arg-type]
        table["super_pod_list"] = [{"super_pod_id": str(pod), "server_list": [{"server_id": s} for s in members]}
                                   for pod, members in sorted(pods.items())]
    return table
