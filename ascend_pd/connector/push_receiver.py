"""Decode side of push mode: announce the blocks a transfer should land in, then wait for every sender's notice."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import msgspec

from ascend_pd import kernels
from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.metadata import AscendPDMetadata, PushRecv
from ascend_pd.connector.routes import transpose_split
from ascend_pd.connector.worker import WorkerSide

logger = logging.getLogger(__name__)


@dataclass
class _Incoming:
    request_id: str
    transfer_id: str
    peer: str  # KVAddress.describe(), for the logs
    block_ids: list[int]
    senders: set[int]
    deadline: float
    taken_up: float
    reported: set[int] = field(default_factory=set)
    ok: bool = True
    # from the senders' notices, for the exposed transfer: the last prefill end, the first write, the bytes
    prefilled_at: float | None = None
    first_write_at: float | None = None
    nbytes: int = 0
    timed: bool = True  # every sender said when


class PushReceiver(WorkerSide):
    """A decode rank in push mode: for each transfer it tells every sending prefill rank where to write
    (PushReady), and reports the request's KV in place once each sender said its writes ended (PushDone)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._incoming: dict[str, _Incoming] = {}  # transfer id -> state

    def accept(self, metadata: AscendPDMetadata) -> None:
        super().accept(metadata)
        for recv in metadata.push_recv:
            self._expect(recv)

    def handle(self, message: messages.Request) -> messages.Reply:
        if isinstance(message, messages.PushDone):
            return self._sender_done(message)
        return super().handle(message)

    def _expect(self, recv: PushRecv) -> None:
        reads = self.plan.reads(self.tp_rank, recv.transfer_id)
        senders = {read.src_rank for read in reads}
        now = time.monotonic()
        deadline = now + self.config.kv_load_timeout_s
        if recv.local_block_ids:
            incoming = _Incoming(recv.request_id, recv.transfer_id, recv.peer.describe(), recv.local_block_ids,
                                 senders, deadline=deadline, taken_up=now)
            with self.lock:
                self._incoming[recv.transfer_id] = incoming
        ready = messages.PushReady(transfer_id=recv.transfer_id, block_ids=recv.local_block_ids,
                                   first_block=recv.first_block, dst=self.metadata, dst_host=self.host,
                                   dst_port=self.port)
        for sender in sorted(senders):
            self.jobs.submit(self._announce, recv, sender, ready, deadline)

    def _announce(self, recv: PushRecv, sender: int, ready: messages.PushReady, deadline: float) -> None:
        def with_time_left() -> messages.PushReady:  # taken afresh by every try of the side channel
            return msgspec.structs.replace(ready, expires_in_s=max(0.0, deadline - time.monotonic()))

        try:
            reply = self.peers.ask(*recv.peer.address(sender),
                                   with_time_left if ready.block_ids else ready, deadline=deadline)
        except side_channel.PeerUnreachable as error:
            reply = messages.Refused(reason=str(error))
        if isinstance(reply, messages.Refused) and ready.block_ids:
            self._fail(recv.transfer_id, f"prefill rank {sender} of {recv.peer.engine_id}: {reply.reason}")

    def _sender_done(self, done: messages.PushDone) -> messages.Reply:
        with self.lock:
            incoming = self._incoming.get(done.transfer_id)
            if incoming is None:
                return messages.Ack()  # already failed or timed out
            incoming.reported.add(done.src_rank)
            incoming.ok &= done.ok
            _note_times(incoming, done)
            complete = incoming.reported >= incoming.senders
            if complete:
                del self._incoming[done.transfer_id]
        if complete:
            self.jobs.submit(self._complete, incoming)
        return messages.Ack()

    def _complete(self, incoming: _Incoming) -> None:
        if incoming.ok:
            reads = self.plan.reads(self.tp_rank, incoming.transfer_id)
            for plane in self.planes:
                split = transpose_split(reads, plane.info, reads[0].src_heads_per_rank)
                if split > 1:
                    kernels.block_transpose(plane.tensor, incoming.block_ids, split)
            self.device.drain()  # vLLM may run the request as soon as it is reported received
        with self.lock:
            if incoming.ok:
                self.stats.record_wait(time.monotonic() - incoming.taken_up)
                if incoming.timed and incoming.nbytes:
                    self.record_arrival(incoming.request_id, incoming.prefilled_at, incoming.first_write_at,
                                        incoming.nbytes)
            else:
                logger.error("AscendPD: request %s: a prefill rank of %s reported a failed push",
                             incoming.request_id, incoming.peer)
                self.failed_blocks.update(incoming.block_ids)
                self.stats.record_failure()
            self.received.add(incoming.request_id)

    def _fail(self, transfer_id: str, reason: str) -> None:
        with self.lock:
            incoming = self._incoming.pop(transfer_id, None)
            if incoming is None:
                return
            logger.error("AscendPD: request %s: push from %s failed: %s", incoming.request_id, incoming.peer,
                         reason)
            self.failed_blocks.update(incoming.block_ids)
            self.stats.record_failure()
            self.received.add(incoming.request_id)

    def expire(self, now: float) -> None:
        with self.lock:
            late = [tid for tid, inc in self._incoming.items() if inc.deadline <= now]
        for tid in late:
            self._fail(tid, f"not every prefill rank reported within kv_load_timeout_s={self.config.kv_load_timeout_s}")


def _note_times(incoming: _Incoming, done: messages.PushDone) -> None:
    """Fold one sender's times into the transfer's: it ends with the last prefill rank, starts with the first write."""
    if done.prefilled_at is None or (done.first_write_at is None and done.nbytes):
        incoming.timed = False
        return
    incoming.prefilled_at = max(incoming.prefilled_at or done.prefilled_at, done.prefilled_at)
    if done.first_write_at is not None:
        incoming.first_write_at = min(incoming.first_write_at or done.first_write_at, done.first_write_at)
    incoming.nbytes += done.nbytes
