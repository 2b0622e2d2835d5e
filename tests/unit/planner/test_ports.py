"""Ports handed out per host: ranges free on every host an instance touches, and a clear error when they run out."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.planner.ports import HostPorts

EPHEMERAL = (20000, 36000)


def test_hosts_start_afresh_and_a_spanning_instance_gets_a_range_free_on_both():
    ports = HostPorts(EPHEMERAL)
    assert ports.claim("a", ["h1"], 2, 16) == (8100, 36000)
    assert ports.claim("b", ["h2"], 1, 8) == (8100, 36000)  # another host: its own ranges
    http, kv = ports.claim("c", ["h1", "h2"], 2, 32)  # must clear both a's and b's ranges
    assert (http, kv) == (8102, 36016)
    assert ports.claim("d", ["h2"], 1, 1) == (8104, 36048)


def test_side_channel_ports_past_65535_name_the_instance_and_host():
    ports = HostPorts(EPHEMERAL)
    ports.claim("big", ["h1"], 1, 65535 - 36000)
    with pytest.raises(InputError) as caught:
        ports.claim("decode-7", ["h1"], 1, 2)
    assert "decode-7" in caught.value.message and "h1" in caught.value.message and "65535" in caught.value.message


def test_http_ports_stay_where_render_s_coordination_ports_clear_the_ephemeral_range():
    ports = HostPorts(EPHEMERAL)
    http, _ = ports.claim("wide", ["h1"], 900, 1)
    assert http + 900 - 1 + 11000 < EPHEMERAL[0]
    with pytest.raises(InputError, match="HTTP"):
        ports.claim("prefill-0", ["h1"], 1, 1)


def test_nodes_whose_ephemeral_range_fills_the_top_put_side_channels_below_it():
    ephemeral = (20000, 20000 + 1000 * 64)  # 64 devices per node: past 65535
    ports = HostPorts(ephemeral)
    http, kv = ports.claim("decode-0", ["h1"], 64, 64)
    assert kv + 64 - 1 < ephemeral[0]
    assert not set(range(http, http + 64)) & set(range(kv, kv + 64))
    assert not set(range(http + 10000, http + 64 + 11000)) & set(range(kv, kv + 64))
