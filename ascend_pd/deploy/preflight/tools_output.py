"""Parsers for what npu-smi and hccn_tool print, kept apart from running them so each format is tested alone."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|")
_CHIP_ROW = re.compile(r"^\|\s*(\d+)(?:\s+(\d+))?\s*\|\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*\|")
_PING = re.compile(r"(\d+) packets transmitted, (\d+) received")
_TLS = re.compile(r"tls switch\[(\d)\]")


@dataclass(frozen=True)
class NpuRow:
    npu: int
    name: str
    health: str
    devices: tuple[int, ...]  # device ids of its chips, as ASCEND_RT_VISIBLE_DEVICES numbers them


def parse_npu_smi_info(text: str) -> list[NpuRow]:
    """The device table of `npu-smi info`: one row per NPU, then one row per chip (A3 rows add the chip's
    Phy-ID, which is its device id; on A2 the NPU id is the device id). The process table after it is ignored."""
    rows: list[NpuRow] = []
    current: dict | None = None
    for line in text.splitlines():
        if "Process id" in line:
            break
        npu = _NPU_ROW.match(line)
        chip = _CHIP_ROW.match(line)
        if chip and current is not None:
            device = int(chip.group(2)) if chip.group(2) is not None else current["npu"]
            current["devices"].append(device)
        elif npu and not npu.group(2).isdigit():
            current = {"npu": int(npu.group(1)), "name": npu.group(2), "health": npu.group(3), "devices": []}
            rows.append(current)  # type: ignore[arg-type]
    return [NpuRow(r["npu"], r["name"], r["health"], tuple(r["devices"])) for r in rows]  # type: ignore[index]


def parse_link(text: str) -> str | None:
    """'link status: UP' -> 'UP'."""
    match = re.search(r"link status:\s*(\S+)", text)
    return match.group(1) if match else None


def parse_ip(text: str) -> str | None:
    """'ipaddr:10.0.0.2' -> '10.0.0.2'; None when the device has no address."""
    match = re.search(r"ipaddr:\s*(\d+\.\d+\.\d+\.\d+)", text)
    return match.group(1) if match else None


def parse_tls_switch(text: str) -> int | None:
    match = _TLS.search(text)
    return int(match.group(1)) if match else None


def parse_ping_received(text: str) -> tuple[int, int] | None:
    """(transmitted, received) from hccn_tool's ping summary."""
    match = _PING.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_key_values(text: str) -> dict[str, str]:
    """key=value lines (version.info, ascend_toolkit_install.info, hccn.conf); keys lower-cased."""
    pairs = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            pairs[key.strip().lower()] = value.strip()
    return pairs


def version_key(version: str) -> tuple[int, ...]:
    """Order CANN versions: 8.3.RC1 < 8.3.RC2 < 8.3.0 < 8.5.0 (a release candidate comes before its release)."""
    key = []
    for part in re.findall(r"[A-Za-z]+|\d+", version):
        if part.isdigit():
            key.append(int(part))
        elif part.lower() == "rc":
            key.append(-1)  # 8.3.RC1 -> (8, 3, -1, 1), below 8.3.0 -> (8, 3, 0)
    return tuple(key)
