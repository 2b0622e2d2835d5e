"""Prefill side of push mode: write each layer's blocks to the decode ranks as soon as the layer is computed."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ascend_pd import kernels
from ascend_pd.connector import faults, messages
from ascend_pd.connector.config import ENGINE_GRACE_S
from ascend_pd.connector.cpus import start_transfer_thread
from ascend_pd.connector.metadata import AscendPDMetadata, PushSend
from ascend_pd.connector.recent import Recent
from ascend_pd.connector.routes import LayoutMismatch, check_block_ids, check_compatible, direct_copies, route
from ascend_pd.connector.transport import Span, TransferFailed
from ascend_pd.connector.worker import WorkerSide

logger = logging.getLogger(__name__)

EARLY_CAP = 4096  # transfers announced before their request: each holds a decode rank's metadata (~100 KiB at most)


@dataclass(frozen=True)
class _Job:
    """One layer's share of a prefill step: its planes, the prompt blocks [first, stop) it wrote, and the device
    event behind that write (the model's cache write is asynchronous on an NPU)."""

    planes: list[int]
    first: int
    stop: int
    written: Any = None


@dataclass
class _Target:
    """One decode rank this prefill rank writes to for a transfer."""

    ready: messages.PushReady | None = None
    write_by: float = float("inf")  # monotonic: the last moment a write may start and still end before D gives up
    pending: list[_Job] = field(default_factory=list)  # layers computed but not yet handed to a write
    draining: bool = False
    writes: list[Future] = field(default_factory=list)
    finalizing: bool = False
    done: bool = False
    first_write_at: float | None = None  # wall clock
    nbytes: int = 0


@dataclass
class _Transfer:
    """One transfer this prefill rank writes: the request's blocks, the decode ranks it writes to, the layers so far."""

    request_id: str
    transfer_id: str
    block_ids: list[int]
    targets: dict[int, _Target]
    jobs: list[_Job] = field(default_factory=list)  # every layer range computed so far, for late announcements
    prefilled: bool = False
    prefilled_at: Future | None = None  # wall clock when the last layer's KV was in memory


class PushSender(WorkerSide):
    """A prefill rank in push mode: it learns where each decode rank wants a transfer's blocks (PushReady), writes
    every layer there as the model finishes it, and tells each decode rank when all its writes have ended."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._transfers: dict[str, _Transfer] = {}  # transfer id -> state
        # Announcements before the request, for kv_load_timeout_s at most (D has given up on them by then).
        self._early: Recent[list[tuple[float, messages.PushReady]]] = Recent(self.config.kv_load_timeout_s,
                                                                              EARLY_CAP)
        # Notes when a prompt's last layer is in memory (a device wait), never queued behind the writes.
        self._clock = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ascend-pd-clock",
                                         initializer=self._start_job_thread)

    def _start_job_thread(self) -> None:
        # The writes wait on the Transfer Engine on these threads while the prefill computes: they run below it.
        # (Only here: a decode rank that reads while both engines' OpenMP teams spin on every core would starve.)
        start_transfer_thread()
        self.device.bind_thread()

    def targets(self, transfer_id: str) -> dict[int, _Target]:
        """The decode ranks that read (part of) their KV from this prefill rank for a transfer."""
        return {d: _Target() for d in range(self.config.decode.tp_size)
                if any(r.src_rank == self.tp_rank for r in self.plan.reads(d, transfer_id))}

    def accept(self, metadata: AscendPDMetadata) -> None:
        super().accept(metadata)
        for request_id in metadata.released:
            self._abandon(request_id)
        for send in metadata.push_send:
            with self.lock:
                out = self._transfers.get(send.transfer_id)
                if out is None:
                    out = _Transfer(send.request_id, send.transfer_id, send.block_ids, self.targets(send.transfer_id))
                    self._transfers[send.transfer_id] = out
                    early = self._early.pop(send.transfer_id) or []
                else:
                    early = []
                out.block_ids = send.block_ids
            for received, ready in early:
                self._attach(out, ready, received)

    def save_kv_layer(self, layer_name: str, metadata: AscendPDMetadata) -> None:
        planes = self.layer_planes.get(layer_name)
        if not planes:
            return
        written = self.device.mark() if metadata.push_send else None  # on the model's thread and stream
        for send in metadata.push_send:
            job = _Job(planes, send.first, send.stop, written)
            with self.lock:
                out = self._transfers.get(send.transfer_id)
                if out is None:
                    continue
                out.jobs.append(job)
                for rank, target in out.targets.items():
                    if target.ready is not None and target.ready.block_ids:
                        self._queue_writes(out, rank, target, [job])

    def wait_for_save(self, metadata: AscendPDMetadata) -> None:
        for send in metadata.push_send:
            if send.last_step:
                self._prefilled(send)

    def _prefilled(self, send: PushSend) -> None:
        with self.lock:
            out = self._transfers.get(send.transfer_id)
            if out is None:
                return
            out.prefilled = True
            if not out.targets:  # no decode rank reads from this rank
                self.served.put(out.request_id, True, time.monotonic())
                del self._transfers[send.transfer_id]
                return
            last_layer = out.jobs[-1].written if out.jobs else None
            out.prefilled_at = self._clock.submit(self._computed_at, last_layer)
        for rank in list(out.targets):
            self._maybe_finalize(out, rank)

    def handle(self, message: messages.Request) -> messages.Reply:
        if not isinstance(message, messages.PushReady):
            return super().handle(message)
        refusal = None
        if message.block_ids:
            try:
                check_compatible(self.metadata.planes, message.dst.planes, self.block_size, message.dst.block_size)
                check_block_ids(message.block_ids, message.dst.planes, f"decode rank {message.dst.tp_rank}")
            except LayoutMismatch as error:
                # Nothing will be written to this rank: keep it as an empty target so P frees its blocks at once.
                refusal = messages.Refused(reason=str(error))
                message = msgspec.structs.replace(message, block_ids=[])
        with self.lock:
            out = self._transfers.get(message.transfer_id)
            if out is None:  # D was faster than P's scheduler: keep it until the request shows up
                now = time.monotonic()
                early = self._early.get(message.transfer_id)
                if early is None:
                    early = []
                    self._early.put(message.transfer_id, early, now)
                early.append((now, message))
                return refusal or messages.Ack()
        reply = self._attach(out, message, time.monotonic())
        return refusal or reply

    def _attach(self, out: _Transfer, ready: messages.PushReady, received: float) -> messages.Reply:
        rank = ready.dst.tp_rank
        with self.lock:
            target = out.targets.get(rank)
            if target is None:
                return messages.Refused(reason=f"prefill rank {self.tp_rank} sends nothing to decode rank {rank} "
                                               f"for transfer {out.transfer_id}")
            target.ready = ready
            if ready.expires_in_s is not None:  # a write lasts at most the engine's timeout and our grace on it
                target.write_by = received + ready.expires_in_s - self.transport.timeout_s - ENGINE_GRACE_S
            if ready.block_ids:
                self._queue_writes(out, rank, target, out.jobs)
        self._maybe_finalize(out, rank)
        return messages.Ack()

    def _queue_writes(self, out: _Transfer, rank: int, target: _Target, jobs: list[_Job]) -> None:
        """Hand layers to the target's writer (caller holds the lock); layers that pile up while a write is in
        flight go together in the next batch, so a fast prefill makes few large batches and a slow one streams."""
        target.pending.extend(jobs)
        if not target.draining:
            target.draining = True
            target.writes.append(self.jobs.submit(self._drain, out, rank, target))

    def _drain(self, out: _Transfer, rank: int, target: _Target) -> None:
        while True:
            with self.lock:
                jobs, target.pending = target.pending, []
                if not jobs:
                    target.draining = False
                    return
            if time.monotonic() > target.write_by:
                # D gives up on the transfer before such a write could end, and hands its blocks to a recompute
                raise TransferFailed(f"too late to write to decode rank {rank}: it gives up on transfer "
                                     f"{out.transfer_id} before a write started now could end")
            started = time.time()
            if target.first_write_at is None:
                target.first_write_at = started
            written = self._write(out, rank, target.ready, jobs)
            target.nbytes += written
            if self.trace is not None:
                self.trace.event("write", start=started, end=time.time(), transfer=out.transfer_id, rank=rank,
                                 layers=len(jobs), bytes=written)

    def _computed_at(self, written: Any) -> float:
        self.device.wait(written)
        return time.time()

    def _write(self, out: _Transfer, rank: int, ready: messages.PushReady, jobs: list[_Job]) -> int:
        """Write the layers' blocks to a decode rank; the bytes written."""
        reads = [read for read in self.plan.reads(rank, out.transfer_id) if read.src_rank == self.tp_rank]
        for job in jobs:
            self.device.wait(job.written)  # the layer's KV must be in memory before the engine reads it
        spans, nbytes = [], 0
        for job in jobs:
            planes = job.planes
            first = max(job.first, ready.first_block)
            stop = min(job.stop, ready.first_block + len(ready.block_ids), len(out.block_ids))
            if first >= stop:
                continue
            src_blocks = out.block_ids[first:stop]
            dst_blocks = ready.block_ids[first - ready.first_block:stop - ready.first_block]
            for read in reads:
                for index in planes:
                    src, dst = self.planes[index].info, ready.dst.planes[index]
                    rt = route(read, src, dst)
                    if rt.staged:
                        nbytes += self._write_staged(index, rt, ready, src_blocks, dst_blocks)
                    else:
                        spans += [Span(local=c.src, remote=c.dst, length=c.length)
                                  for c in direct_copies(rt, src, dst, src_blocks, dst_blocks)]
        return nbytes + self.record(self.transport.run(ready.dst.session, "write", spans))

    def _write_staged(self, index: int, rt, ready: messages.PushReady, src_blocks: list[int],
                      dst_blocks: list[int]) -> int:
        """Pack this rank's head slice of each block into staging, then write the packed blocks whole; the bytes."""
        tensor, src, dst = self.planes[index].tensor, self.planes[index].info, ready.dst.planes[index]
        packed_len = rt.head_count * (src.block_len // src.num_heads)
        per_chunk = self.staging.blocks_per_chunk(packed_len)
        nbytes = 0
        with self.staging.lock:
            for start in range(0, len(src_blocks), per_chunk):
                chunk_src, chunk_dst = src_blocks[start:start + per_chunk], dst_blocks[start:start + per_chunk]
                shape = (len(chunk_src), tensor.shape[1], rt.head_count, tensor.shape[3])
                packed = self.staging.view(0, len(chunk_src) * packed_len, tensor.dtype, shape)
                kernels.gather_heads(tensor, chunk_src, rt.head_start, rt.head_count, out=packed)
                self.device.drain()  # the engine reads the staging buffer from memory
                spans = [Span(local=self.staging.address + k * packed_len,
                              remote=dst.base_addr + db * dst.block_stride + rt.dst_offset, length=packed_len)
                         for k, db in enumerate(chunk_dst)]
                nbytes += self.record(self.transport.run(ready.dst.session, "write", spans))
        return nbytes

    def _maybe_finalize(self, out: _Transfer, rank: int) -> None:
        with self.lock:
            target = out.targets[rank]
            if not out.prefilled or target.ready is None or target.finalizing:
                return
            target.finalizing = True
        self.post_notice(self._finalize, out, rank, target)

    def _finalize(self, out: _Transfer, rank: int, target: _Target) -> None:
        """When every write to a decode rank has completed, tell it so (or that they failed)."""
        ok = True
        for write in target.writes:
            try:
                write.result()
            except Exception as error:
                ok = False
                what = f"transfer {out.transfer_id}: writing to decode rank {rank}"
                logger.error("AscendPD: %s failed: %s", what, faults.explain(logger, error, what))
        if not ok:
            with self.lock:
                self.stats.record_failure()
        if target.ready.block_ids:
            self.notify(target.ready.dst_host, target.ready.dst_port,
                        messages.PushDone(transfer_id=out.transfer_id, src_rank=self.tp_rank, ok=ok,
                                          prefilled_at=self._prefilled_at(out), first_write_at=target.first_write_at,
                                          nbytes=target.nbytes))
        with self.lock:
            target.done = True
            if all(t.done for t in out.targets.values()) and self._transfers.pop(out.transfer_id, None):
                self.served.put(out.request_id, True, time.monotonic())

    def shutdown(self) -> None:
        super().shutdown()
        self._clock.shutdown(wait=False, cancel_futures=True)

    def _prefilled_at(self, out: _Transfer) -> float | None:
        try:
            return out.prefilled_at.result(timeout=self.transport.timeout_s + ENGINE_GRACE_S)
        except FutureTimeout:
            return None  # the device never completed the layer: the writes waiting for it failed too

    def _abandon(self, request_id: str) -> None:
        """The prefill request ended early: tell the decode ranks already waiting not to expect data."""
        with self.lock:
            found = [tid for tid, out in self._transfers.items() if out.request_id == request_id]
            outs = [self._transfers.pop(tid) for tid in found]
        for out in outs:
            for rank, target in out.targets.items():
                if target.ready is not None and target.ready.block_ids:
                    self.post_notice(self.notify, target.ready.dst_host, target.ready.dst_port,
                                     messages.PushDone(transfer_id=out.transfer_id, src_rank=self.tp_rank, ok=False))

    def expire(self, now: float) -> None:
        with self.lock:
            self._early.expire(now)
            dropped = [tid for tid, out in self._transfers.items()
                       if out.request_id in self.held and self.held[out.request_id] <= now]
            for tid in dropped:
                del self._transfers[tid]
