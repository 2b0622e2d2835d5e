"""kv_transfer_config parsing: good configs give the connector's settings, bad ones name the field and the fix."""

from __future__ import annotations

import pytest

from ascend_pd.connector.config import parse_config, pause_for_platform
from ascend_pd.errors import InputError

SHAPES = {"ascend_pd_shapes": {"prefill": {"tp_size": 8, "dp_size": 2}, "decode": {"tp_size": 4, "dp_size": 4}}}
PREFILL, DECODE = SHAPES["ascend_pd_shapes"]["prefill"], SHAPES["ascend_pd_shapes"]["decode"]


def shapes(prefill=PREFILL, decode=DECODE) -> dict:
    return {"ascend_pd_shapes": {"prefill": prefill, "decode": decode}}


def test_decode_worker_ports_follow_kv_port_plus_dp_rank_times_tp_plus_tp_rank():
    config = parse_config("kv_consumer", "decode-0", "36200", {"mode": "push", "protocol": "ascend", **SHAPES})
    assert (config.role, config.mode, config.protocol) == ("decode", "push", "ascend")
    assert config.local.tp_size == 4 and config.remote.tp_size == 8
    # DP rank 3, TP rank 1 of a TP4 instance: 36200 + 3*4 + 1
    assert config.side_channel_port(3, 1) == 36213


def test_defaults_are_pull_over_tcp():
    config = parse_config("kv_producer", "prefill-0", 36000, dict(SHAPES))
    assert (config.role, config.mode, config.protocol, config.abort_timeout_s) == ("prefill", "pull", "tcp", 480.0)


@pytest.mark.parametrize("role,extra,field", [
    ("kv_both", SHAPES, "kv_role"),
    ("kv_producer", {**SHAPES, "mode": "layerwise"}, "kv_connector_extra_config.mode"),
    ("kv_producer", {**SHAPES, "protocol": "hccl"}, "kv_connector_extra_config.protocol"),
    ("kv_producer", {"ascend_pd_shapes": {"decode": DECODE}}, "kv_connector_extra_config.ascend_pd_shapes.prefill"),
    ("kv_producer", shapes(decode={"tp_size": 0}), "kv_connector_extra_config.ascend_pd_shapes.decode.tp_size"),
    ("kv_producer", shapes(decode={"tp_size": "four"}), "kv_connector_extra_config.ascend_pd_shapes.decode.tp_size"),
    # the shapes as vllm-ascend's own connectors take them: vllm-ascend checks those against the engine's own TP/DP
    ("kv_producer", {"prefill": PREFILL, "decode": DECODE}, "kv_connector_extra_config.ascend_pd_shapes"),
    # a misspelt key would otherwise leave its setting at the default without a word
    ("kv_consumer", {**SHAPES, "kv_load_timeout": 60}, "kv_connector_extra_config.kv_load_timeout"),
    ("kv_consumer", {**SHAPES, "staging_mib": 0}, "kv_connector_extra_config.staging_mib"),
    ("kv_consumer", {**SHAPES, "staging_mib": "64"}, "kv_connector_extra_config.staging_mib"),
    ("kv_producer", {**SHAPES, "abort_timeout_s": -1}, "kv_connector_extra_config.abort_timeout_s"),
    ("kv_producer", {**SHAPES, "idle_step_pause_ms": -1}, "kv_connector_extra_config.idle_step_pause_ms"),
    ("kv_producer", {**SHAPES, "idle_step_pause_ms": "2"}, "kv_connector_extra_config.idle_step_pause_ms"),
    ("kv_consumer", {**SHAPES, "push_timeout_s": 60}, "kv_connector_extra_config.push_timeout_s"),
    ("kv_consumer", {**SHAPES, "kv_load_timeout_s": 0}, "kv_connector_extra_config.kv_load_timeout_s"),
    ("kv_consumer", {**SHAPES, "transfer_timeout_s": 2}, "kv_connector_extra_config.transfer_timeout_s"),
    ("kv_consumer", {**SHAPES, "peer_backoff_s": "soon"}, "kv_connector_extra_config.peer_backoff_s"),
    # a push write may take transfer_timeout_s + 5 s: D must wait longer than that
    ("kv_consumer", {**SHAPES, "mode": "push", "kv_load_timeout_s": 10, "transfer_timeout_s": 5},
     "kv_connector_extra_config.kv_load_timeout_s"),
])
def test_bad_settings_name_their_field(role, extra, field):
    with pytest.raises(InputError) as error:
        parse_config(role, "prefill-0", 36000, extra)
    assert error.value.field == field and error.value.file == "kv_transfer_config" and error.value.fix


def test_the_idle_step_pause_is_given_in_milliseconds_and_zero_turns_it_off():
    assert parse_config("kv_producer", "prefill-0", 36000, dict(SHAPES)).idle_step_pause_s == 0.002
    assert parse_config("kv_producer", "prefill-0", 36000, {**SHAPES, "idle_step_pause_ms": 0}).idle_step_pause_s == 0


def test_a_port_above_65535_is_refused():
    with pytest.raises(InputError) as error:
        parse_config("kv_producer", "prefill-0", 70000, dict(SHAPES))
    assert error.value.field == "kv_port"


def test_vllm_ascends_own_shape_keys_are_tolerated_beside_ours_and_not_read():
    config = parse_config("kv_consumer", "decode-0", 36000, {**SHAPES, "decode": {"tp_size": 1, "dp_size": 1}})
    assert config.decode.tp_size == DECODE["tp_size"]


def test_the_staging_buffer_is_sized_in_mib():
    assert parse_config("kv_consumer", "decode-0", 36000, {**SHAPES, "staging_mib": 8}).staging_bytes == 8 << 20


@pytest.mark.parametrize("on_cpu,dp,paused", [(True, 1, True), (True, 2, False), (False, 1, False)])
def test_the_idle_step_pause_applies_only_to_a_lone_engine_on_vllm_cpu(on_cpu, dp, paused):
    """The ranks of a DP group step together: one rank pausing on an empty step slows every rank of the group."""
    config = pause_for_platform(parse_config("kv_producer", "prefill-0", 36000, dict(SHAPES)), on_cpu, dp)
    assert (config.idle_step_pause_s > 0) == paused


@pytest.mark.parametrize("given,expected", [
    ("prefill-0-0123456789abcdef0123456789abcdef", "prefill-0"),
    ("decode-0-0123456789abcdef0123456789abcdef_dp3", "decode-0_dp3"),
    ("decode-0_dp3", "decode-0_dp3"),
    ("my-engine-deadbeef", "my-engine-deadbeef"),  # not vllm-ascend's 32-digit suffix
])
def test_the_engine_id_is_the_deployments_whatever_vllm_ascend_appended(given, expected):
    """vllm-ascend makes every engine_id unique with -<uuid>; logs, traces and push peers go by deployment.yaml's."""
    assert parse_config("kv_producer", given, 36000, dict(SHAPES)).engine_id == expected
