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


def test_http_ports_stop_below_the_ascend_ephemeral_range():
    ports = HostPorts(EPHEMERAL)
    ports.claim("wide", ["h1"], 20000 - 8100, 1)
    with pytest.raises(InputError, match="ephemeral"):
        ports.claim("prefill-0", ["h1"], 1, 1)
