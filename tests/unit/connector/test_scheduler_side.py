"""The connector's scheduler side inside vLLM's real Scheduler and KV cache manager (no model, no workers)."""

from __future__ import annotations

import pytest

from vllm_scheduler import KV_PORT, runner_output, request, scheduler, tiny_model_dir, vllm_config

PROMPT = 40  # tokens: three 16-token blocks, the last one partial


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


def pull_params(remote_blocks=(10, 11, 12)):
    return {"do_remote_prefill": True, "remote_block_ids": list(remote_blocks), "remote_engine_id": "prefill-0",
            "remote_request_id": "p-req", "remote_host": "10.0.0.1", "remote_port": 36000, "remote_tp_size": 2}


def free_blocks(sched) -> int:
    return sched.kv_cache_manager.block_pool.get_num_free_blocks()


def test_pull_decode_waits_for_the_read_then_decodes_from_the_last_prompt_token(model_dir):
    from vllm.v1.request import RequestStatus

    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    req = request("d-req", PROMPT, pull_params())
    sched.add_request(req)
    out = sched.schedule()
    (recv,) = out.kv_connector_metadata.pull_recv
    assert len(recv.local_block_ids) == 3 and recv.remote_block_ids == [10, 11, 12]
    assert (recv.remote_request_id, recv.peer.host, recv.peer.port, recv.peer.tp_size) == ("p-req", "10.0.0.1",
                                                                                           36000, 2)
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS and out.num_scheduled_tokens == {}
    sched.update_from_output(out, runner_output(out, finished_recving={"d-req"}))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"d-req": 1}  # only the last prompt token runs, to sample the next one
    assert out.kv_connector_metadata.pull_recv == []  # the read is scheduled once


def test_pull_decode_recomputes_the_prompt_when_the_read_failed(model_dir):
    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    sched.add_request(request("d-req", PROMPT, pull_params()))
    out = sched.schedule()
    (recv,) = out.kv_connector_metadata.pull_recv
    sched.update_from_output(out, runner_output(out, finished_recving={"d-req"},
                                                invalid_block_ids=set(recv.local_block_ids)))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"d-req": PROMPT}


def test_pull_decode_reads_the_prompt_blocks_in_order_when_prefill_also_sent_a_lookahead_block(model_dir):
    """A prefill with a draft model holds a lookahead block after the prompt's; block i of the prompt on D must
    come from block i on P, not be shifted by the extra block."""
    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    sched.add_request(request("d-req", PROMPT, pull_params(remote_blocks=(9, 10, 11, 12))))
    (recv,) = sched.schedule().kv_connector_metadata.pull_recv
    assert recv.remote_block_ids == [9, 10, 11] and len(recv.local_block_ids) == 3


def test_pull_decode_aborted_before_allocation_still_tells_prefill_to_free(model_dir):
    from vllm.v1.request import RequestStatus

    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    sched.add_request(request("d-req", PROMPT, pull_params()))
    sched.finish_requests("d-req", RequestStatus.FINISHED_ABORTED)
    (recv,) = sched.schedule().kv_connector_metadata.pull_recv
    assert recv.local_block_ids == [] and recv.remote_request_id == "p-req"


def test_pull_prefill_keeps_the_blocks_and_returns_their_coordinates(model_dir):
    sched = scheduler(vllm_config(model_dir, role="kv_producer", mode="pull"))
    free_at_start = free_blocks(sched)
    sched.add_request(request("p-req", PROMPT, {"do_remote_decode": True}))
    out = sched.schedule()
    blocks = list(out.scheduled_new_reqs[0].block_ids[0])
    outputs = sched.update_from_output(out, runner_output(out))
    (finished,) = outputs[0].outputs
    params = finished.kv_transfer_params
    assert params["do_remote_prefill"] is True and params["remote_block_ids"] == blocks
    assert (params["remote_port"], params["remote_tp_size"], params["remote_engine_id"]) == (KV_PORT, 1,
                                                                                            "kv_producer-0")
    assert params["remote_request_id"] == "p-req" and params["remote_block_size"] == 16
    assert free_blocks(sched) == free_at_start - 3  # held for the decode instance
    out = sched.schedule()
    assert out.kv_connector_metadata.held == {"p-req": 30}
    sched.update_from_output(out, runner_output(out, finished_sending={"p-req"}))
    assert free_blocks(sched) == free_at_start


def with_draft_lookahead(sched, tokens: int = 1):
    """What a draft model (deepseek_mtp, one speculative token) changes in the scheduler: every allocation reserves
    `tokens` lookahead slots past the scheduled ones (VllmConfig.num_lookahead_tokens)."""
    sched.num_lookahead_tokens = tokens
    return sched


def test_pull_prefill_with_a_draft_model_returns_only_the_prompts_blocks(model_dir):
    prompt = 48  # three full blocks: the lookahead slot needs a fourth
    sched = with_draft_lookahead(scheduler(vllm_config(model_dir, role="kv_producer", mode="pull")))
    sched.add_request(request("p-req", prompt, {"do_remote_decode": True}))
    out = sched.schedule()
    blocks = list(out.scheduled_new_reqs[0].block_ids[0])
    assert len(blocks) == 4
    (finished,) = sched.update_from_output(out, runner_output(out))[0].outputs
    assert finished.kv_transfer_params["remote_block_ids"] == blocks[:3]


def test_pull_prefill_end_reaches_decode_for_the_exposed_transfer(model_dir):
    import time

    sched = scheduler(vllm_config(model_dir, role="kv_producer", mode="pull"))
    sched.add_request(request("p-req", PROMPT, {"do_remote_decode": True}))
    out = sched.schedule()
    before = time.time()
    (finished,) = sched.update_from_output(out, runner_output(out))[0].outputs
    params = finished.kv_transfer_params
    assert before <= params["remote_prefilled_at"] <= time.time()
    decode = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull"))
    decode.add_request(request("d-req", PROMPT, dict(params, remote_host="10.0.0.1")))
    (recv,) = decode.schedule().kv_connector_metadata.pull_recv
    assert recv.prefilled_at == params["remote_prefilled_at"]


def test_pull_prefill_aborted_request_frees_its_blocks_at_once(model_dir):
    from vllm.v1.request import RequestStatus

    sched = scheduler(vllm_config(model_dir, role="kv_producer", mode="pull"))
    free_at_start = free_blocks(sched)
    sched.add_request(request("p-req", PROMPT, {"do_remote_decode": True}, max_tokens=4))
    sched.schedule()
    sched.finish_requests("p-req", RequestStatus.FINISHED_ABORTED)
    assert free_blocks(sched) == free_at_start
    assert sched.schedule().kv_connector_metadata.held == {}


def test_push_prefill_sends_each_chunk_of_the_prompt_as_it_is_computed(model_dir):
    sched = scheduler(vllm_config(model_dir, role="kv_producer", mode="push", max_num_batched_tokens=16))
    sched.add_request(request("p-req", PROMPT, {"do_remote_decode": True, "transfer_id": "t-1"}))
    steps = []
    for chunk in range(3):  # 16 + 16 + 8 tokens
        out = sched.schedule()
        (send,) = out.kv_connector_metadata.push_send
        steps.append((send.transfer_id, send.first, send.stop, send.last_step, len(send.block_ids)))
        sched.update_from_output(out, runner_output(out, sample=chunk == 2))
    assert steps == [("t-1", 0, 1, False, 1), ("t-1", 1, 2, False, 2), ("t-1", 2, 3, True, 3)]
    out = sched.schedule()
    assert out.kv_connector_metadata.held == {"p-req": 120.0}  # finished after one token, held until sent
    assert out.kv_connector_metadata.push_send == []


def test_push_decode_announces_its_blocks_for_the_transfer(model_dir):
    from vllm.v1.request import RequestStatus

    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="push", prefill_tp=2))
    params = {"do_remote_prefill": True, "transfer_id": "t-1", "remote_engine_id": "prefill-0",
              "remote_host": "10.0.0.1", "remote_port": 36000, "remote_tp_size": 2}
    req = request("d-req", PROMPT, params)
    sched.add_request(req)
    out = sched.schedule()
    (recv,) = out.kv_connector_metadata.push_recv
    assert (recv.transfer_id, recv.first_block, len(recv.local_block_ids)) == ("t-1", 0, 3)
    assert req.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    sched.update_from_output(out, runner_output(out, finished_recving={"d-req"}))
    assert sched.schedule().num_scheduled_tokens == {"d-req": 1}


def test_requests_without_transfer_params_are_left_alone(model_dir):
    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    sched.add_request(request("plain", PROMPT, None))
    out = sched.schedule()
    assert out.num_scheduled_tokens == {"plain": PROMPT}
    assert out.kv_connector_metadata.pull_recv == []


def test_only_steps_that_compute_nothing_pause_for_the_transfer_threads(model_dir, monkeypatch):
    import ascend_pd.connector.connector as facade

    pauses = []
    monkeypatch.setattr(facade.time, "sleep", pauses.append)
    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    sched.add_request(request("d-req", PROMPT, pull_params()))
    out = sched.schedule()  # the request waits for its KV: nothing to compute
    assert out.total_num_scheduled_tokens == 0 and pauses == [0.002]
    sched.update_from_output(out, runner_output(out, finished_recving={"d-req"}))
    out = sched.schedule()  # the last prompt token runs
    assert out.total_num_scheduled_tokens == 1 and pauses == [0.002]


def test_pull_prefill_with_ranks_on_two_nodes_hands_decode_each_ranks_host(model_dir):
    hosts = ["10.0.0.1", "10.0.0.2"]
    sched = scheduler(vllm_config(model_dir, role="kv_producer", mode="pull", prefill_tp=2, rank_hosts=hosts))
    sched.add_request(request("p-req", PROMPT, {"do_remote_decode": True}))
    out = sched.schedule()
    outputs = sched.update_from_output(out, runner_output(out))
    (params,) = [o.kv_transfer_params for o in outputs[0].outputs if o.kv_transfer_params]
    assert params["remote_rank_hosts"] == hosts
    decode = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=2))
    decode.add_request(request("d-req", PROMPT, {**params, "remote_block_ids": params["remote_block_ids"]}))
    (recv,) = decode.schedule().kv_connector_metadata.pull_recv
    assert [recv.peer.address(rank) for rank in (0, 1)] == [("10.0.0.1", recv.peer.port),
                                                           ("10.0.0.2", recv.peer.port + 1)]


@pytest.mark.parametrize("mode,extra", [("pull", {"remote_request_id": "p-req", "remote_block_ids": [10, 11, 12]}),
                                        ("push", {"transfer_id": "t-1"})])
def test_what_decode_schedules_reaches_its_workers_through_pickle_unchanged(model_dir, mode, extra):
    """vLLM's executor pickles the scheduler output, connector metadata and the KVAddress structs in it included,
    to every worker process."""
    import pickle

    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode=mode, prefill_tp=2))
    params = {"do_remote_prefill": True, "remote_engine_id": "prefill-0", "remote_host": "10.0.0.1",
              "remote_port": 36002, "remote_tp_size": 2, "remote_dp_rank": 1,
              "remote_rank_hosts": ["10.0.0.1", "10.0.0.2"], **extra}
    sched.add_request(request("d-req", PROMPT, params))
    metadata = sched.schedule().kv_connector_metadata
    received = pickle.loads(pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL))
    assert received == metadata
    (recv,) = received.pull_recv if mode == "pull" else received.push_recv
    assert (recv.peer.dp_rank, [recv.peer.address(rank) for rank in (0, 1)]) == (
        1, [("10.0.0.1", 36002), ("10.0.0.2", 36003)])


def test_a_prefill_of_another_tp_than_decode_maps_heads_from_is_recomputed_not_misread(model_dir):
    """APD415 keeps one prefill TP per deployment; a request from another one (a hand-made proxy, a half-done
    resize) must not be read with the wrong head mapping."""
    sched = scheduler(vllm_config(model_dir, role="kv_consumer", mode="pull", prefill_tp=4))
    sched.add_request(request("d-req", PROMPT, pull_params()))
    out = sched.schedule()
    assert out.kv_connector_metadata.pull_recv == [] and out.num_scheduled_tokens == {"d-req": PROMPT}
