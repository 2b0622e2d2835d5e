"""What peers' messages can make a worker keep, and what a worker leaves running once it shut down."""

from __future__ import annotations

import logging
import threading
import time

from ascend_pd.connector import messages
from ascend_pd.connector.config import parse_config
from ascend_pd.connector.metadata import AscendPDMetadata
from ascend_pd.connector.pull_worker import PullWorker
from ascend_pd.connector.push_sender import EARLY_CAP, PushSender
from ascend_pd.connector.worker import NOTICE_GRACE_S, SERVED_CAP
from tests.ports import free_port


def prefill_worker(kind=PullWorker, d_tp: int = 2, **extra):
    config = parse_config("kv_producer", "prefill-0", 26500, {
        "ascend_pd_shapes": {"prefill": {"tp_size": 1}, "decode": {"tp_size": d_tp}}, **extra})
    return kind(config, "127.0.0.1", 0, 0, num_kv_heads=4, is_mla=False)


def test_a_flood_of_bogus_read_done_keeps_a_prefill_ranks_memory_bounded_and_it_expires():
    worker = prefill_worker(abort_timeout_s=0.5, kv_load_timeout_s=0.5)
    try:
        for i in range(SERVED_CAP + 5000):  # half-reported requests: one decode rank of two
            worker.handle(messages.ReadDone(request_id=f"bogus-{i}", dst_rank=0))
        for i in range(SERVED_CAP + 5000):  # fully reported, never held here
            for rank in (0, 1):
                worker.handle(messages.ReadDone(request_id=f"late-{i}", dst_rank=rank))
        assert len(worker._reports) <= SERVED_CAP and len(worker.served) <= SERVED_CAP
        time.sleep(0.6)
        worker.get_finished()
        assert len(worker._reports) == 0 and len(worker.served) == 0  # past both timeouts nothing is kept
    finally:
        worker.shutdown()


def test_a_retried_read_done_counts_once():
    """A decode rank that lost the Ack sends its ReadDone again: the blocks wait for the other decode rank still."""
    worker = prefill_worker()
    try:
        worker.on_metadata(AscendPDMetadata(held={"r-1": 60.0}))
        worker.handle(messages.ReadDone(request_id="r-1", dst_rank=0))
        worker.handle(messages.ReadDone(request_id="r-1", dst_rank=0))
        assert "r-1" not in worker.get_finished()[0]
        worker.handle(messages.ReadDone(request_id="r-1", dst_rank=1))
        assert "r-1" in worker.get_finished()[0]
    finally:
        worker.shutdown()


def test_a_flood_of_announcements_for_unknown_transfers_is_capped():
    worker = prefill_worker(PushSender, d_tp=1, mode="push")
    try:
        meta = messages.AgentMetadata(engine_id="decode-0", tp_rank=0, tp_size=1, session="127.0.0.1:1",
                                      block_size=16, planes=[])
        for i in range(EARLY_CAP + 500):
            worker.handle(messages.PushReady(transfer_id=f"t-{i}", block_ids=[], first_block=0, dst=meta,
                                             dst_host="127.0.0.1", dst_port=1))
        assert len(worker._early) == EARLY_CAP
    finally:
        worker.shutdown()


def test_shutdown_ends_a_notice_to_a_dead_peer_within_its_grace_and_nothing_is_logged_after(caplog):
    """A notice retries for up to kv_load_timeout_s; one still retrying when its worker shut down kept going and
    logged "not delivered" seconds later, into whatever ran next. Shutdown now gives posted notices
    NOTICE_GRACE_S to go out, then ends them."""
    caplog.set_level(logging.WARNING, logger="ascend_pd")
    worker = prefill_worker(kv_load_timeout_s=60, handshake_timeout_s=5, handshake_retries=20)
    worker.post_notice(worker.notify, "127.0.0.1", free_port(), messages.ReadDone(request_id="r", dst_rank=0))
    notice = next(iter(worker._posted))
    time.sleep(0.3)  # in its first try
    assert not notice.done()
    started = time.monotonic()
    worker.shutdown()
    assert notice.result(timeout=1) is False
    assert time.monotonic() - started < NOTICE_GRACE_S + 1
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline and any(t.name.startswith("ascend-pd-notify") for t in threading.enumerate()):
        time.sleep(0.05)
    assert not any(t.name.startswith("ascend-pd-notify") for t in threading.enumerate())
    time.sleep(0.5)
    assert not [r for r in caplog.records if "not delivered" in r.getMessage()]


def test_a_notice_posted_once_shutdown_began_is_dropped_not_raised_into_the_job_that_posts_it():
    """A transfer job that ends while its worker shuts down posts its notice to a pool that takes no more work."""
    worker = prefill_worker()
    worker.shutdown()
    worker.post_notice(worker.notify, "127.0.0.1", free_port(), messages.ReadDone(request_id="r", dst_rank=0))
    assert not worker._posted
