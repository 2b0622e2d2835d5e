"""A thin wrapper over mooncake.engine.TransferEngine: P2P handshake, merged registration, coalesced batches."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from ascend_pd.connector.cpus import unpin_current_thread

logger = logging.getLogger(__name__)


# HCCL, under Mooncake's Ascend transport, registers at most this many memory regions per process
# (docs/vllm-ascend.md, "memory registration"); the other transports have no such limit.
ASCEND_REGION_LIMIT = 256


def region_limit(protocol: str) -> int | None:
    return ASCEND_REGION_LIMIT if protocol == "ascend" else None


def engine_timeout_s(protocol: str, timeout_s: float) -> float:
    """Give the Transfer Engine its own bound on a batch (it reads it from the environment when it starts) unless
    the operator set one; return the bound in force. Mooncake's TCP and RDMA transports read MC_TRANSFER_TIMEOUT
    in seconds; its Ascend transport reads ASCEND_CONNECT_TIMEOUT and ASCEND_TRANSFER_TIMEOUT in milliseconds
    (docs/vllm-ascend.md, "transfer timeouts")."""
    if protocol == "ascend":
        os.environ.setdefault("ASCEND_CONNECT_TIMEOUT", str(int(timeout_s * 1000)))
        os.environ.setdefault("ASCEND_TRANSFER_TIMEOUT", str(int(timeout_s * 1000)))
        return max(float(os.environ["ASCEND_CONNECT_TIMEOUT"]), float(os.environ["ASCEND_TRANSFER_TIMEOUT"])) / 1000
    os.environ.setdefault("MC_TRANSFER_TIMEOUT", str(max(5, round(timeout_s))))
    return float(os.environ["MC_TRANSFER_TIMEOUT"])


class TransferFailed(Exception):
    """The Transfer Engine reported a failed batch (peer gone, bad address, timeout)."""


@dataclass(frozen=True)
class Span:
    """One copy: `length` bytes between a local and a remote address."""

    local: int
    remote: int
    length: int


def coalesce(spans: list[Span]) -> list[Span]:
    """Join spans that continue each other on both sides, so runs of contiguous blocks move as one copy."""
    out: list[Span] = []
    for span in spans:
        last = out[-1] if out else None
        if last and last.local + last.length == span.local and last.remote + last.length == span.remote:
            out[-1] = Span(last.local, last.remote, last.length + span.length)
        else:
            out.append(span)
    return out


@dataclass(frozen=True)
class BatchResult:
    """What one batch moved and how long it took."""

    bytes: int
    copies: int
    seconds: float


class Transport:
    """One Transfer Engine per worker process, with a small pool that runs batches off the caller's thread."""

    def __init__(self, host: str, protocol: Literal["ascend", "tcp", "rdma"], timeout_s: float = 30.0,
                 workers: int = 4):
        from mooncake.engine import TransferEngine  # heavy, optional: only workers that move KV need it

        self.timeout_s = engine_timeout_s(protocol, timeout_s)
        self._engine = TransferEngine()
        status = self._engine.initialize(host, "P2PHANDSHAKE", protocol, "")
        if status != 0:
            raise RuntimeError(f"Mooncake TransferEngine.initialize({host!r}, P2PHANDSHAKE, {protocol!r}) "
                               f"returned {status}; check that the {protocol} transport is available on this host")
        self.session = f"{host}:{self._engine.get_rpc_port()}"
        self._registered: list[int] = []
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ascend-pd-transfer",
                                        initializer=unpin_current_thread)

    def register(self, regions: list[tuple[int, int]], limit: int | None = None) -> int:
        """Register each (address, bytes) region as given (kv_layout.registration_regions merges within an
        allocation, never across); returns how many are registered. With a `limit` (the transport's), refuse before
        registering anything that would go over it."""
        merged = sorted(set(regions))
        if limit is not None and len(self._registered) + len(merged) > limit:
            raise RuntimeError(f"the KV caches need {len(self._registered) + len(merged)} registered memory regions, "
                               f"more than the {limit} the transport allows; allocate the caches in fewer tensors "
                               "(vllm-ascend does) or serve fewer layers per worker (pipeline parallelism)")
        for address, length in merged:
            status = self._engine.register_memory(address, length)
            if status != 0:
                raise RuntimeError(f"Mooncake register_memory(0x{address:x}, {length}) returned {status}")
            self._registered.append(address)
        return len(self._registered)

    def run(self, peer: str, op: Literal["read", "write"], spans: list[Span]) -> BatchResult:
        """Move spans to or from a peer session in one batch; raise TransferFailed if the engine reports an error."""
        copies = coalesce(spans)
        if not copies:
            return BatchResult(0, 0, 0.0)
        batch = self._engine.batch_transfer_sync_read if op == "read" else self._engine.batch_transfer_sync_write
        started = time.perf_counter()
        status = batch(peer, [c.local for c in copies], [c.remote for c in copies], [c.length for c in copies])
        seconds = time.perf_counter() - started
        if status != 0:
            raise TransferFailed(f"{op} of {len(copies)} copies with {peer} returned {status}")
        return BatchResult(sum(c.length for c in copies), len(copies), seconds)

    def submit(self, peer: str, op: Literal["read", "write"], spans: list[Span]) -> Future[BatchResult]:
        """Run a batch on the transfer pool; the future completes (or raises TransferFailed) when it is done."""
        return self._pool.submit(self.run, peer, op, spans)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for address in self._registered:
            self._engine.unregister_memory(address)
        self._registered.clear()
