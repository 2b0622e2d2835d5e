"""Worker side of pull mode: D reads each request's blocks from the P ranks that hold them, then lets P free them."""

from __future__ import annotations

import logging
import time
from collections import Counter

from ascend_pd import kernels
from ascend_pd.connector import messages
from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv
from ascend_pd.connector.routes import Route, check_block_ids, direct_copies, route, transpose_split
from ascend_pd.connector.transport import Span
from ascend_pd.connector.worker import WorkerSide
from ascend_pd.kernels.tp_mapping import SourceRead

logger = logging.getLogger(__name__)


class PullWorker(WorkerSide):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Prefill: how many decode ranks will report on each request, and how many have.
        self._expected_reports = sum(self.tp_rank in self.candidates(d) for d in range(self.config.decode.tp_size))
        self._reports: Counter[str] = Counter()

    def candidates(self, dst_rank: int) -> set[int]:
        """Every prefill rank a decode rank may read from; all of them hear when it is done."""
        return {rank for group in self.plan.destinations[dst_rank].groups for rank in group.replicas}

    # ---- prefill side ----
    def handle(self, message: messages.Request) -> messages.Reply:
        if not isinstance(message, messages.ReadDone):
            return super().handle(message)
        with self.lock:
            self._reports[message.request_id] += 1
            if self._reports[message.request_id] >= self._expected_reports:
                del self._reports[message.request_id]
                self.served.add(message.request_id)
        return messages.Ack()

    # ---- decode side ----
    def accept(self, metadata: AscendPDMetadata) -> None:
        super().accept(metadata)
        for recv in metadata.pull_recv:
            self.jobs.submit(self._pull, recv, time.monotonic())

    def _pull(self, recv: PullRecv, taken_up: float) -> None:
        ok = True
        if recv.local_block_ids:
            try:
                self._read(recv)
            except Exception as error:  # every failure becomes a load error: vLLM recomputes the prompt
                ok = False
                logger.error("AscendPD: request %s: reading KV from %s failed: %s", recv.request_id,
                             recv.peer.engine_id, error)
            # Kernels queued on the blocks finish before vLLM runs (or recomputes) the request on them.
            self.device.drain()
        for rank in sorted(self.candidates(self.tp_rank)):
            self.notify(recv.peer.host, recv.peer.port + rank,
                        messages.ReadDone(request_id=recv.remote_request_id, dst_rank=self.tp_rank))
        if not recv.local_block_ids:
            return  # aborted before allocation: nothing is waiting for this read
        with self.lock:
            if ok:
                self.stats.record_wait(time.monotonic() - taken_up)
            else:
                self.failed_blocks.update(recv.local_block_ids)
                self.stats.record_failure()
            self.received.add(recv.request_id)

    def _read(self, recv: PullRecv) -> None:
        reads = self.plan.reads(self.tp_rank, recv.remote_request_id or recv.request_id)
        futures, staged = [], []
        for read in reads:
            remote = self.peer_metadata(recv.peer, read.src_rank)
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
            futures.append(self.transport.submit(remote.session, "read", spans))
        for future in futures:
            self.record(future.result())
        for read, remote, index, rt in staged:
            self._read_staged(remote, index, rt, read, recv)
        self._transpose(reads, recv.local_block_ids)

    def _read_staged(self, remote: messages.AgentMetadata, index: int, rt: Route, read: SourceRead,
                     recv: PullRecv) -> None:
        """Whole source blocks into staging, then their head slice into the local cache."""
        plane, src = self.planes[index], remote.planes[index]
        tensor = plane.tensor
        per_chunk = self.staging.blocks_per_chunk(src.block_len)
        pairs = list(zip(recv.remote_block_ids, recv.local_block_ids))
        with self.staging.lock:
            for start in range(0, len(pairs), per_chunk):
                chunk = pairs[start:start + per_chunk]
                spans = [Span(local=self.staging.address + k * src.block_len,
                              remote=src.base_addr + sb * src.block_stride, length=src.block_len)
                         for k, (sb, _) in enumerate(chunk)]
                self.record(self.transport.run(remote.session, "read", spans))
                whole = self.staging.view(0, len(chunk) * src.block_len, tensor.dtype,
                                          (len(chunk), tensor.shape[1], src.num_heads, tensor.shape[3]))
                packed = kernels.gather_heads(whole, list(range(len(chunk))), rt.head_start, rt.head_count)
                kernels.scatter_heads(tensor, [db for _, db in chunk], read.dst_head_start, packed)
                self.device.drain()  # the next chunk's read overwrites the staging buffer these kernels read

    def _transpose(self, reads: tuple[SourceRead, ...], block_ids: list[int]) -> None:
        """Blocks assembled from several senders' whole blocks are [split, bs, H/split, D]: make them NHD."""
        for plane in self.planes:
            split = transpose_split(reads, plane.info, reads[0].src_heads_per_rank)
            if split > 1:
                kernels.block_transpose(plane.tensor, block_ids, split)

