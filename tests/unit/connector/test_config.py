"""kv_transfer_config parsing: good configs give the connector's settings, bad ones name the field and the fix."""

from __future__ import annotations

import pytest

from ascend_pd.connector.config import parse_config
from ascend_pd.errors import InputError

SHAPES = {"prefill": {"tp_size": 8, "dp_size": 2}, "decode": {"tp_size": 4, "dp_size": 4}}


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
    ("kv_producer", {"decode": SHAPES["decode"]}, "kv_connector_extra_config.prefill"),
    ("kv_producer", {**SHAPES, "decode": {"tp_size": 0}}, "kv_connector_extra_config.decode.tp_size"),
    ("kv_producer", {**SHAPES, "decode": {"tp_size": "four"}}, "kv_connector_extra_config.decode.tp_size"),
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
