"""Worker side of pull mode: D reads each request's blocks from the P ranks that hold them, then lets P free them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ascend_pd import kernels
from ascend_pd.connector import faults, messages
from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv
from ascend_pd.connector.recent import Recent
from ascend_pd.connector.routes import Route, check_block_ids, direct_copies, route, transpose_split
from ascend_pd.connector.transport import Span
from ascend_pd.connector.worker import SERVED_CAP, WorkerSide
from ascend_pd.kernels.tp_mapping import SourceRead

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    """A decode request waiting for its KV: until its deadline, and whether bytes already move into its blocks."""

    recv: PullRecv
    taken_up: float
    deadline: float
    moving: bool = False
    gave_up: bool = False
    started_at: float | None = None  # wall clock when the first read was issued
    nbytes: int = 0


class _GaveUp(Exception):
    """expire() has reported the request failed: its job stops before it moves anything."""


class PullWorker(WorkerSide):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending: dict[str, _Pending] = {}  # decode: requests whose read has not been reported
        # Prefill: how many decode ranks will report on each request, and which have (a retried report counts
        # once). A request P frees after abort_timeout_s without all reports needs them no longer.
        self._expected_reports = sum(self.tp_rank in self.candidates(d) for d in range(self.config.decode.tp_size))
        self._reports: Recent[set[int]] = Recent(self.config.abort_timeout_s, SERVED_CAP)

    def candidates(self, dst_rank: int) -> set[int]:
        """Every prefill rank a decode rank may read from; all of them hear when it is done."""
        return {rank for group in self.plan.destinations[dst_rank].groups for rank in group.replicas}

    # ---- prefill side ----
    def handle(self, message: messages.Request) -> messages.Reply:
        if not isinstance(message, messages.ReadDone):
            return super().handle(message)
        now = time.monotonic()
        with self.lock:
            reported = self._reports.get(message.request_id)
            if reported is None:
                reported = set()
                self._reports.put(message.request_id, reported, now)
            reported.add(message.dst_rank)
            if len(reported) >= self._expected_reports:
                self._reports.pop(message.request_id)
                self.served.put(message.request_id, True, now)
        return messages.Ack()

    # ---- decode side ----
    def accept(self, metadata: AscendPDMetadata) -> None:
        super().accept(metadata)
        now = time.monotonic()
        for recv in metadata.pull_recv:
            pending = _Pending(recv, taken_up=now, deadline=now + self.config.kv_load_timeout_s)
            if recv.local_block_ids:
                with self.lock:
                    self._pending[recv.request_id] = pending
            self.jobs.submit(self._pull, pending)

    def _pull(self, pending: _Pending) -> None:
        recv = pending.recv
        error = None
        if recv.local_block_ids:
            try:
                self._read(pending)
            except _GaveUp:
                pass  # reported by expire(): past its deadline before a byte moved
            except Exception as failure:  # every failure becomes a load error: vLLM recomputes the prompt
                error = failure
            finally:
                # Kernels queued on the blocks finish before vLLM runs (or recomputes) the request on them.
                self.device.drain()
        # P may free its blocks now; a P that does not hear it frees them after its abort_timeout_s. Posted before
        # the report, so a shutdown that follows the request's end still gives them their grace.
        for rank in sorted(self.candidates(self.tp_rank)):
            self.post_notice(self.notify, *recv.peer.address(rank),
                             messages.ReadDone(request_id=recv.remote_request_id, dst_rank=self.tp_rank))
        if recv.local_block_ids:
            self._report(pending, error)

    def _report(self, pending: _Pending, error: Exception | None) -> None:
        """Tell vLLM (through get_finished) that the request's KV is in, or that its blocks failed; once."""
        recv = pending.recv
        with self.lock:
            if self._pending.pop(recv.request_id, None) is None:
                return  # expire() reported it already
            if error is not None:
                what = f"reading KV from {recv.peer.describe()}"
                self._fail(pending, f"{what} failed: {faults.explain(logger, error, what)}")
                return
            self.stats.record_wait(time.monotonic() - pending.taken_up)
            if recv.prefilled_at is not None and pending.started_at is not None:
                now = self.record_arrival(recv.request_id, recv.prefilled_at, pending.started_at, pending.nbytes)
                if self.trace is not None:
                    self.trace.event("read", start=pending.started_at, end=now, request=recv.request_id,
                                     bytes=pending.nbytes)
            self.received.add(recv.request_id)

    def _fail(self, pending: _Pending, reason: str) -> None:
        """Report the request's blocks as a load error (caller holds the lock): vLLM recomputes or fails it."""
        logger.error("AscendPD: request %s: %s", pending.recv.request_id, reason)
        self.failed_blocks.update(pending.recv.local_block_ids)
        self.stats.record_failure()
        self.received.add(pending.recv.request_id)

    def expire(self, now: float) -> None:
        """Past its deadline, a request not yet moving bytes is a load error at once; one whose batch is in flight
        ends with that batch, which the Transfer Engine's own timeout bounds (a late write must not land in blocks
        vLLM has given to the recompute)."""
        with self.lock:
            self._reports.expire(now)
            late = [p for p in self._pending.values() if p.deadline <= now and not p.moving]
            for pending in late:
                del self._pending[pending.recv.request_id]
                pending.gave_up = True
                self._fail(pending, f"no KV from {pending.recv.peer.describe()} within "
                                    f"kv_load_timeout_s={self.config.kv_load_timeout_s:g}")

    def _start_moving(self, pending: _Pending) -> None:
        """From here on bytes land in the request's blocks: expire() leaves it to end with its batches."""
        with self.lock:
            if pending.gave_up:
                raise _GaveUp
            pending.moving = True

    def _read(self, pending: _Pending) -> None:
        recv = pending.recv
        reads = self.plan.reads(self.tp_rank, recv.remote_request_id or recv.request_id)
        sources = [(read, self.peer_metadata(recv.peer, read.src_rank, pending.deadline)) for read in reads]
        self._start_moving(pending)
        pending.started_at = time.time()
        futures, staged = [], []
        for read, remote in sources:
            check_block_ids(recv.remote_block_ids, remote.planes, f"prefill {recv.peer.engine_id}")
            spans = []
            for index, plane in enumerate(self.planes):
                rt = route(read, remote.planes[index], plane.info)
                if rt.staged:
                    staged.append((read, remote, index, rt))
                    continue
                spans += [Span(local=c.dst, remote=c.src, length=c.length) for c in
                          direct_copies(rt, remote.planes[index], plane.info, recv.remote_block_ids,
                                        recv.local_block_ids)]
            futures.append((self.transport.submit(remote.session, "read", spans), remote.session))
        try:
            for future, session in futures:
                pending.nbytes += self.record(self.result(future, session))
            for read, remote, index, rt in staged:
                pending.nbytes += self._read_staged(remote, index, rt, read, recv)
        except Exception:
            for read in reads:  # a restarted P has a new session: hand-shake afresh next time
                self.peers.forget(*recv.peer.address(read.src_rank))
            raise
        self._transpose(reads, recv.local_block_ids)

    def _read_staged(self, remote: messages.AgentMetadata, index: int, rt: Route, read: SourceRead,
                     recv: PullRecv) -> int:
        """Whole source blocks into staging, then their head slice into the local cache; the bytes read."""
        plane, src = self.planes[index], remote.planes[index]
        tensor = plane.tensor
        per_chunk = self.staging.blocks_per_chunk(src.block_len)
        pairs = list(zip(recv.remote_block_ids, recv.local_block_ids))
        nbytes = 0
        with self.staging.lock:
            for start in range(0, len(pairs), per_chunk):
                chunk = pairs[start:start + per_chunk]
                spans = [Span(local=self.staging.address + k * src.block_len,
                              remote=src.base_addr + sb * src.block_stride, length=src.block_len)
                         for k, (sb, _) in enumerate(chunk)]
                nbytes += self.record(self.result(self.transport.submit(remote.session, "read", spans),
                                                  remote.session))
                whole = self.staging.view(0, len(chunk) * src.block_len, tensor.dtype,
                                          (len(chunk), tensor.shape[1], src.num_heads, tensor.shape[3]))
                packed = kernels.gather_heads(whole, list(range(len(chunk))), rt.head_start, rt.head_count)
                kernels.scatter_heads(tensor, [db for _, db in chunk], read.dst_head_start, packed)
                self.device.drain()  # the next chunk's read overwrites the staging buffer these kernels read
        return nbytes

    def _transpose(self, reads: tuple[SourceRead, ...], block_ids: list[int]) -> None:
        """Blocks assembled from several senders' whole blocks are [split, bs, H/split, D]: make them NHD."""
        for plane in self.planes:
            split = transpose_split(reads, plane.info, reads[0].src_heads_per_rank)
            if split > 1:
                kernels.block_transpose(plane.tensor, block_ids, split)

