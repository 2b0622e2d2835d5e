"""The KV handoff contract: the keys on the wire are the ones peers of older releases read, what the proxy and P write
is what D's connector reads after a JSON trip, a newer peer's extra keys are ignored, and a missing or mistyped key
is a clear error that makes D compute the prompt itself."""

from __future__ import annotations

import json
import logging

import pytest

from ascend_pd.connector.config import parse_config
from ascend_pd.connector.scheduler import SchedulerSide
from ascend_pd.deploy import handoff
from ascend_pd.deploy.handoff import HandoffError, KVAddress, PullToDecode, PushToDecode
from ascend_pd.proxy.backend_table import BackendTable, TableEntry, decode_table, encode_table

SHAPES = {"ascend_pd_shapes": {"prefill": {"tp_size": 2, "dp_size": 2}, "decode": {"tp_size": 1, "dp_size": 1}}}
P_RANK_1 = KVAddress(engine_id="prefill-0", host="10.0.0.1", port=36002, tp_size=2, dp_rank=1,
                     rank_hosts=("10.0.0.1", "10.0.0.2"))


def over_http(params: dict) -> dict:
    """What vLLM hands the connector after the dict crossed the proxy as JSON."""
    return json.loads(json.dumps(params))


def decode_side() -> SchedulerSide:
    return SchedulerSide(parse_config("kv_consumer", "decode-0", 36100, dict(SHAPES)), "10.0.1.1", 0, 16)


def pushed() -> dict:
    return over_http(handoff.encode(handoff.push_to_decode(P_RANK_1, "t-1")))


def test_each_message_carries_the_keys_peers_of_older_releases_read():
    """Pinned on purpose: renaming a key breaks a proxy, P or D that is not upgraded at the same time."""
    assert handoff.encode(handoff.ToPrefill()) == {"do_remote_decode": True}
    assert handoff.encode(handoff.PushToPrefill(transfer_id="t-1")) == {"do_remote_decode": True,
                                                                        "transfer_id": "t-1"}
    assert pushed() == {"do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_host": "10.0.0.1",
                        "remote_port": 36002, "remote_tp_size": 2, "remote_dp_rank": 1,
                        "remote_rank_hosts": ["10.0.0.1", "10.0.0.2"], "transfer_id": "t-1"}
    assert handoff.encode(handoff.pulled(P_RANK_1, request_id="p-req", block_ids=[3, 4], block_size=16,
                                         num_tokens=20, prefilled_at=1.5)) == {
        "do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_host": "10.0.0.1", "remote_port": 36002,
        "remote_tp_size": 2, "remote_dp_rank": 1, "remote_rank_hosts": ["10.0.0.1", "10.0.0.2"],
        "do_remote_decode": False, "remote_request_id": "p-req", "remote_block_ids": [3, 4],
        "remote_block_size": 16, "remote_num_tokens": 20, "remote_prefilled_at": 1.5}
    assert handoff.encode(handoff.LayerwiseToDecode(metaserver="http://proxy:8000/v1/metaserver")) == {
        "do_remote_decode": False, "do_remote_prefill": True, "metaserver": "http://proxy:8000/v1/metaserver"}


def test_what_the_proxy_sends_decode_in_push_reaches_the_prefill_rank_it_names():
    received = decode_side().received(pushed(), PushToDecode)
    assert received is not None and received.transfer_id == "t-1"
    assert received.prefill == P_RANK_1
    assert [received.prefill.address(rank) for rank in (0, 1)] == [("10.0.0.1", 36002), ("10.0.0.2", 36003)]


def test_every_tp_rank_of_a_prefill_on_one_node_listens_on_its_host_and_logs_name_it():
    address = KVAddress(engine_id="prefill-0", host="10.0.0.1", port=36002, tp_size=2, dp_rank=1)
    assert [address.address(rank) for rank in (0, 1)] == [("10.0.0.1", 36002), ("10.0.0.1", 36003)]
    assert address.describe() == P_RANK_1.describe() == "prefill-0 (10.0.0.1:36002)"


def test_what_prefill_returns_in_pull_is_what_decode_reads_the_blocks_from():
    prefill = SchedulerSide(parse_config("kv_producer", "prefill-0", 36000, dict(SHAPES)), "10.0.0.1", 1, 16)
    answer = over_http(handoff.encode(handoff.pulled(prefill.address, request_id="p-req", block_ids=[3, 4],
                                                     block_size=16, num_tokens=20, prefilled_at=1.5)))
    received = decode_side().received(answer, PullToDecode)
    assert received is not None
    assert received.prefill == KVAddress(engine_id="prefill-0", host="10.0.0.1", port=36002, tp_size=2, dp_rank=1)
    assert (received.remote_request_id, received.remote_block_ids, received.remote_prefilled_at) == ("p-req", [3, 4],
                                                                                                      1.5)


def test_keys_a_newer_peer_or_vllm_adds_are_ignored():
    params = {**pushed(), "remote_prefill_cached_tokens": 8, "remote_kv_dtype": "int8"}
    assert decode_side().received(params, PushToDecode).prefill == P_RANK_1


def test_a_peer_of_an_older_release_without_the_optional_keys_is_read():
    params = {key: value for key, value in pushed().items() if key not in ("remote_dp_rank", "remote_rank_hosts")}
    assert decode_side().received(params, PushToDecode) is not None


@pytest.mark.parametrize("change,named", [
    ({"remote_host": None}, "`$.remote_host`"),
    ({"remote_port": "36002"}, "`$.remote_port`"),
    ({"remote_rank_hosts": "10.0.0.1"}, "`$.remote_rank_hosts`"),
])
def test_a_mistyped_key_is_named(change, named):
    with pytest.raises(HandoffError, match=named.replace("$", r"\$")):
        handoff.decode({**pushed(), **change}, PushToDecode)


def test_a_missing_key_is_named_and_decode_computes_the_prompt_itself(caplog):
    params = {key: value for key, value in pushed().items() if key != "remote_host"}
    with pytest.raises(HandoffError, match="missing required field `remote_host`"):
        handoff.decode(params, PushToDecode)
    with caplog.at_level(logging.WARNING, logger="ascend_pd.connector.scheduler"):
        assert decode_side().received(params, PushToDecode) is None
    assert "remote_host" in caplog.text and "computing locally" in caplog.text
    assert not handoff.receives_kv(params)  # vLLM schedules the whole prompt here


def test_pull_params_without_blocks_are_refused():
    answer = handoff.encode(handoff.pulled(P_RANK_1, request_id="p-req", block_ids=[3], block_size=16,
                                           num_tokens=1, prefilled_at=1.5))
    with pytest.raises(HandoffError, match="remote_block_ids"):
        handoff.decode({**answer, "remote_block_ids": []}, PullToDecode)


def test_the_backend_table_keeps_the_kv_address_as_deployment_yaml_gives_it():
    table = BackendTable(1, "rev", [TableEntry("http://10.0.0.1:8000", "prefill", kv=P_RANK_1)])
    assert decode_table(encode_table(table), "table").backends[0].kv == P_RANK_1
    minimal = b'{"generation": 1, "revision": "r", "backends": [{"url": "http://h:1", "role": "prefill", ' \
              b'"kv": {"engine_id": "p", "host": "h", "port": 2}}]}'
    assert decode_table(minimal, "table").backends[0].kv == KVAddress("p", "h", 2, tp_size=1, dp_rank=0)
