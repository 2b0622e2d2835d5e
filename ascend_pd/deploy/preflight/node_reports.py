"""Read what each node reported about itself (saved output of npu-smi, hccn_tool and ip), one directory per node,
into the names and addresses `ascend-pd cluster new --from-reports` writes a cluster file from.

The commands an operator runs on each node, writing into reports/<node name>/ (docs/deployments.md shows them):
    npu-smi info                        > npu-smi.txt
    hccn_tool -i <device> -ip -g        > hccn-ip-<device>.txt   (each device npu-smi lists)
    ip -o -4 addr show dev <NIC>        > host-ip.txt
"""

from __future__ import annotations

import re
from ipaddress import AddressValueError, IPv4Address
from pathlib import Path

from ascend_pd.deploy.preflight.tools_output import parse_ip, parse_npu_smi_info
from ascend_pd.errors import InputError
from ascend_pd.hardware.new_cluster import NodeAddresses
from ascend_pd.yamlfile import read_text

NPU_SMI_FILE = "npu-smi.txt"
HOST_IP_FILE = "host-ip.txt"
# `ip -o -4 addr show dev enp189s0f0`: "2: enp189s0f0    inet 10.0.0.5/24 brd 10.0.0.255 scope global ..."
_IP_ADDR_LINE = re.compile(r"^\d+:\s+(\S+)\s+inet\s+(\d+\.\d+\.\d+\.\d+)/\d+", re.MULTILINE)


def hccn_ip_file(device: int) -> str:
    return f"hccn-ip-{device}.txt"


def read_node_reports(directory: str | Path, devices_per_node: int) -> list[NodeAddresses]:
    """One entry per subdirectory of `directory` (its name is the node's), in name order."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError("not a directory", file=str(root), field="--from-reports",
                         fix="name the directory that holds one subdirectory of reports per node")
    nodes = [read_node_report(sub, devices_per_node) for sub in sorted(root.iterdir()) if sub.is_dir()]
    if not nodes:
        raise InputError("holds no node directories", file=str(root), field="--from-reports",
                         fix="put each node's reports in a subdirectory named after the node")
    return nodes


def read_node_report(node_dir: Path, devices_per_node: int) -> NodeAddresses:
    interface, host_ip = _host_address(node_dir / HOST_IP_FILE)
    return NodeAddresses(name=node_dir.name, host_ip=host_ip, interface=interface,
                         device_ips=_device_ips(node_dir, devices_per_node))


def _host_address(path: Path) -> tuple[str, str]:
    match = _IP_ADDR_LINE.search(read_text(path))
    if match is None:
        raise InputError("holds no IPv4 address line", file=str(path),
                         fix="save it on the node with `ip -o -4 addr show dev <NIC> > host-ip.txt`, where <NIC> is "
                             "the interface other nodes reach the node on")
    return match.group(1), _address(match.group(2), path)


def _device_ips(node_dir: Path, devices_per_node: int) -> tuple[str, ...]:
    listing = node_dir / NPU_SMI_FILE
    devices = sorted(d for row in parse_npu_smi_info(read_text(listing)) for d in row.devices)
    if devices != list(range(devices_per_node)):
        raise InputError(f"lists devices {devices or 'none'}; this node type has devices 0..{devices_per_node - 1}",
                         file=str(listing), field="--node-type",
                         fix="save the full `npu-smi info > npu-smi.txt` on the node, or choose the node type "
                             "this node is")
    addresses = []
    for device in devices:
        path = node_dir / hccn_ip_file(device)
        address = parse_ip(read_text(path))
        if address is None:
            raise InputError(f"device {device} reports no address", file=str(path),
                             fix=f"set the device's address (hccn_tool -i {device} -ip -s address <ip> netmask "
                                 f"<mask>), then save `hccn_tool -i {device} -ip -g > {path.name}` again")
        addresses.append(_address(address, path))
    return tuple(addresses)


def _address(text: str, path: Path) -> str:
    try:
        return str(IPv4Address(text))
    except AddressValueError:
        raise InputError(f"'{text}' is not an IPv4 address", file=str(path),
                         fix="save the command's output again on the node") from None
