"""Real Mooncake TCP transfers between prefill and decode worker processes: every decode cache byte is checked."""

from __future__ import annotations

import pytest

from ascend_pd.deploy.secrets import KV_SECRET_ENV, new_secret
from cluster import expected_decode_caches, log_of, run, same_bytes, specs
from kv_data import layer_name

pytestmark = pytest.mark.integration


def assert_decode_caches_exact(decode_specs, decode_results):
    for spec, result in zip(decode_specs, decode_results):
        assert result is not None, f"decode rank {spec['tp_rank']} died"
        assert result["received_after_s"] != float("inf"), f"decode rank {spec['tp_rank']} never finished"
        assert result["failed_blocks"] == []
        for layer, planes in expected_decode_caches(spec).items():
            got = result["caches"][layer_name(layer)]
            for index, want in enumerate(planes):
                assert same_bytes(got[index], want), f"rank {spec['tp_rank']} layer {layer} plane {index}"


def assert_prefill_released(prefill_results):
    for rank, result in enumerate(prefill_results):
        assert result is not None, f"prefill rank {rank} died"
        assert result["released_after_s"] != float("inf"), f"prefill rank {rank} never freed its blocks"


CASES = {
    "gqa_p_tp2_to_d_tp1": dict(p_tp=2, d_tp=1, num_kv_heads=4),
    "gqa_p_tp1_to_d_tp2": dict(p_tp=1, d_tp=2, num_kv_heads=4),
    "gqa_p_tp4_to_d_tp1_with_2_kv_heads": dict(p_tp=4, d_tp=1, num_kv_heads=2),
    "mla_p_tp2_to_d_tp1": dict(p_tp=2, d_tp=1, is_mla=True),
}


@pytest.mark.parametrize("mode", ["pull", "push"])
@pytest.mark.parametrize("case", list(CASES))
def test_decode_cache_equals_the_prefill_head_shards(tmp_path, mode, case):
    prefill, decode = specs(tmp_path, mode=mode, **CASES[case])
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


@pytest.mark.parametrize("mode", ["pull", "push"])
@pytest.mark.parametrize("case", list(CASES))
def test_on_the_npu_twin_decode_holds_the_prompt_kv_the_moment_it_reports_it_received(tmp_path, mode, case):
    """Device work is asynchronous and per thread (tests/fakes/torch_npu_twin.py): P's model writes each layer's KV
    as a queued op, and D's cache is read the moment the request is reported, with nothing synchronized. Device 1,
    so a thread that never selected the device works on the wrong one. The staging buffer holds one block, so
    strided head slices take several chunks through it."""
    one_block = 16 * 4 * 64 * 2
    prefill, decode = specs(tmp_path, mode=mode, **CASES[case],
                            common={"npu_device": 1, "staging_bytes": one_block})
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


@pytest.mark.parametrize("p_tp,d_tp", [(2, 1), (1, 2)])
def test_heads_outer_layout_moves_head_slices_directly(tmp_path, p_tp, d_tp):
    prefill, decode = specs(tmp_path, mode="pull", p_tp=p_tp, d_tp=d_tp, num_kv_heads=4,
                            common={"heads_outer": True})
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


def test_push_announcement_before_the_prefill_starts_is_kept(tmp_path):
    prefill, decode = specs(tmp_path, mode="push", p_tp=2, d_tp=1, prefill={"prefill_start_delay_s": 2.0})
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


def test_push_layers_computed_before_the_announcement_are_sent_when_it_arrives(tmp_path):
    prefill, decode = specs(tmp_path, mode="push", p_tp=1, d_tp=1, decode={"decode_start_delay_s": 3.0})
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


@pytest.mark.alone  # times the transfer to a tenth of a second
@pytest.mark.parametrize("mode", ["pull", "push"])
def test_decode_measures_the_transfer_it_waited_for_after_the_prefill(tmp_path, mode):
    """Push writes each layer while the next one computes (0.4 s a layer here): of its transfer, only the last
    layer's share comes after the prefill. Pull starts reading when the prefill has ended: all of it does."""
    prefill, decode = specs(tmp_path, mode=mode, p_tp=1, d_tp=1, prefill={"layer_compute_s": 0.4})
    _, decode_results = run(tmp_path, prefill, decode, wait_for_prefill=False)
    assert_decode_caches_exact(decode, decode_results)
    stats = decode_results[0]["stats"]
    spec = decode[0]
    plane_block_bytes = spec["block_size"] * spec["num_kv_heads"] * spec["head_dim"] * 2  # bf16 K or V of a block
    assert stats["mode"] == mode
    assert stats["request_bytes"] == [len(spec["request"]["dst_blocks"]) * plane_block_bytes * 2 * spec["layers"]]
    (exposed,), (transfer,) = stats["exposed"], stats["request_seconds"]
    if mode == "push":
        assert transfer > 0.6  # the first layer's write started about 0.8 s before the last layer was computed
        assert exposed < 0.25 * transfer
    else:
        assert exposed >= transfer > 0


@pytest.mark.alone  # times the transfer to a tenth of a second
def test_on_the_npu_twin_push_stamps_the_prefill_end_once_the_last_layer_is_on_the_device(tmp_path):
    """D measures the exposed transfer from the prefill's end that P sends; P takes that moment when the last
    layer's device write has run, not when the forward pass returned with the write queued. Here that write takes
    0.6 s of device time: a stamp taken before it would count those 0.6 s as transfer."""
    prefill, decode = specs(tmp_path, mode="push", p_tp=1, d_tp=1, common={"npu_device": 1},
                            prefill={"last_layer_device_s": 0.6})
    _, decode_results = run(tmp_path, prefill, decode, wait_for_prefill=False)
    assert_decode_caches_exact(decode, decode_results)
    (exposed,) = decode_results[0]["stats"]["exposed"]
    assert exposed < 0.3, exposed


def test_multi_chunk_staging_when_the_buffer_holds_fewer_blocks_than_the_request(tmp_path):
    one_block = 16 * 4 * 64 * 2  # block_size * prefill heads * head_dim * bf16: room for one block at a time
    for mode in ("pull", "push"):
        prefill, decode = specs(tmp_path / mode if (tmp_path / mode).mkdir() is None else tmp_path, mode=mode,
                                p_tp=1, d_tp=2, common={"staging_bytes": one_block})
        prefill_results, decode_results = run(tmp_path / mode, prefill, decode)
        assert_decode_caches_exact(decode, decode_results)
        assert_prefill_released(prefill_results)


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_decode_reaches_each_prefill_rank_at_its_own_host_when_the_ranks_span_two_nodes(tmp_path, mode):
    """P's TP2 rank group spread over two hosts (127.0.0.1 and 127.0.0.2, as vLLM's multi-node TP puts them on two
    nodes): D reads (pull) or announces to (push) rank 1 on the second host. Addressed at P's first host alone,
    rank 1's handshake fails and the request's blocks become load errors."""
    hosts = ["127.0.0.1", "127.0.0.2"]
    prefill, decode = specs(tmp_path, mode=mode, p_tp=2, d_tp=1, common={"p_rank_hosts": hosts})
    for spec, host in zip(prefill, hosts):
        spec["host"] = host
    prefill_results, decode_results = run(tmp_path, prefill, decode)
    assert decode_results[0]["failed_blocks"] == []
    assert_decode_caches_exact(decode, decode_results)
    assert_prefill_released(prefill_results)


def test_dead_prefill_peer_becomes_a_load_error_not_a_hang(tmp_path):
    prefill, decode = specs(tmp_path, mode="pull", p_tp=1, d_tp=1, common={"handshake_retries": 1},
                            prefill={"die_after_ready": True})
    _, decode_results = run(tmp_path, prefill, decode, wait_for_prefill=False)
    (result,) = decode_results
    assert result["received_after_s"] < 20
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_a_block_id_outside_the_peers_cache_is_a_load_error_and_moves_nothing(tmp_path, mode):
    """Stale or corrupted kv_transfer_params name a block the peer does not have (the caches hold 12)."""
    key = "src_blocks" if mode == "pull" else "dst_blocks"
    prefill, decode = specs(tmp_path, mode=mode, p_tp=1, d_tp=1,
                            common={"kv_load_timeout_s": 30, "transfer_timeout_s": 5}, **{key: (3, 4, 5, 9, 40)})
    prefill_results, (result,) = run(tmp_path, prefill, decode)
    assert result["received_after_s"] < 20
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert "outside its 12-block cache" in log_of(tmp_path, decode[0])
    assert_prefill_released(prefill_results)


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_a_peer_with_another_deployments_secret_is_refused_and_the_handoff_fails_cleanly(tmp_path, mode):
    """D holds a KV secret of its own: its CURVE handshakes with P fail, so no message passes either way; D's load
    fails well within its timeout with an error naming the secret, and P logs the refusal once however often D
    retries."""
    prefill, decode = specs(tmp_path, mode=mode, p_tp=1, d_tp=1, decode={"kv_secret": new_secret()},
                            common={"kv_load_timeout_s": 11, "transfer_timeout_s": 5, "abort_timeout_s": 4})
    prefill_results, (result,) = run(tmp_path, prefill, decode)
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert result["received_after_s"] < 20
    assert "failed the CURVE handshake: a peer of another deployment" in log_of(tmp_path, decode[0])
    assert KV_SECRET_ENV in log_of(tmp_path, decode[0])
    assert log_of(tmp_path, prefill[0]).count("refused a connection whose handshake needs another KV secret") == 1
    assert prefill_results[0]["stats"]["refused"] >= 2  # every try counted
    for planes in result["caches"].values():  # nothing was written
        for plane in planes:
            assert (plane == -7).all()


def test_prefill_dying_mid_push_becomes_a_load_error_after_the_kv_load_timeout(tmp_path):
    prefill, decode = specs(tmp_path, mode="push", p_tp=1, d_tp=1,
                            common={"kv_load_timeout_s": 11, "transfer_timeout_s": 5},
                            prefill={"die_at_layer": 1, "layer_compute_s": 0.5})
    _, decode_results = run(tmp_path, prefill, decode, wait_for_prefill=False)
    (result,) = decode_results
    # The 11 s run from whichever D saw first: its own request, or P's first layer report, which can arrive a moment
    # before D's request is announced. Failing early (not waiting for the timeout) would land well under 10.5 s.
    assert 10.5 <= result["received_after_s"] < 30, result["received_after_s"]
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert "not every prefill rank reported" in log_of(tmp_path, decode[0])


def test_prefill_frees_blocks_after_the_abort_timeout_when_no_decode_comes(tmp_path):
    prefill, _ = specs(tmp_path, mode="pull", p_tp=1, d_tp=1, common={"abort_timeout_s": 1.5})
    (result,), _ = run(tmp_path, prefill, [])
    assert 1.5 <= result["released_after_s"] < 10


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_request_aborted_on_decode_before_allocation_releases_prefill_blocks(tmp_path, mode):
    prefill, decode = specs(tmp_path, mode=mode, p_tp=2, d_tp=1, dst_blocks=(), common={"abort_timeout_s": 60,
                                                                                         "kv_load_timeout_s": 60})
    prefill_results, _ = run(tmp_path, prefill, decode)
    for result in prefill_results:
        assert result["released_after_s"] < 30  # told by D, long before the 60 s timeouts


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_different_block_sizes_fail_the_handshake_with_a_clear_message(tmp_path, mode):
    prefill, decode = specs(tmp_path, mode=mode, p_tp=1, d_tp=1, decode={"block_size": 32},
                            common={"kv_load_timeout_s": 30, "transfer_timeout_s": 5})
    _, (result,) = run(tmp_path, prefill, decode, wait_for_prefill=False)
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert result["received_after_s"] < 20
    assert "prefill block size 16 != decode block size 32" in log_of(tmp_path, decode[0])


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_a_silent_prefill_is_a_load_error_at_the_kv_load_timeout_and_never_stalls_the_engine_loop(tmp_path, mode):
    """P's side-channel port takes connections and never answers. Its handshake alone (20 tries of 1 s) would
    outlast kv_load_timeout_s: the deadline ends the wait, and no call of vLLM's engine loop waits on P."""
    prefill, decode = specs(tmp_path, mode=mode, p_tp=2, d_tp=1, prefill={"black_hole": True},
                            common={"kv_load_timeout_s": 11, "transfer_timeout_s": 5, "handshake_retries": 20})
    _, (result,) = run(tmp_path, prefill, decode, wait_for_prefill=False)
    assert 10.5 <= result["received_after_s"] < 18, result["received_after_s"]
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert result["longest_hook_s"] < 0.5, result["longest_hook_s"]
    assert f"127.0.0.1:{prefill[0]['kv_port']}" in log_of(tmp_path, decode[0])  # the error names the peer


def test_a_push_that_could_land_after_decode_gave_up_is_never_written(tmp_path):
    """P starts prefilling 4 s after D announced its blocks; D gives up at 11 s and a write may take 5 + 5 s, so any
    write P starts after the first second could still be landing when vLLM hands the blocks to a recompute. P
    writes nothing and says so; D's blocks keep the sentinel they held."""
    prefill, decode = specs(tmp_path, mode="push", p_tp=1, d_tp=1, prefill={"prefill_start_delay_s": 4},
                            common={"kv_load_timeout_s": 11, "transfer_timeout_s": 5})
    prefill_results, (result,) = run(tmp_path, prefill, decode)
    assert result["failed_blocks"] == sorted(decode[0]["request"]["dst_blocks"])
    assert result["received_after_s"] < 10.5  # P's "failed" notice, not D's own timeout
    for planes in result["caches"].values():
        for plane in planes:
            assert (plane[list(decode[0]["request"]["dst_blocks"])] == -7).all()
    assert "too late to write" in log_of(tmp_path, prefill[0])
    assert_prefill_released(prefill_results)
