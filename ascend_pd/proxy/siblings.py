"""Worker processes of one proxy on one host, seeing each other: shared in-flight load, and a private loopback port
each, through which admin changes, metaserver posts and /metrics reach every worker.

The kernel hands each client connection to one worker (SO_REUSEPORT), so without this a worker would route blind to
its siblings' requests, an admin drain would reach one worker in N, and a vllm-ascend D posting its block coordinates
would find the waiting request only one time in N."""

from __future__ import annotations

import asyncio
import hashlib
import mmap
import multiprocessing
import socket
import struct
from dataclasses import dataclass

import aiohttp

SIBLING_HEADER = "X-Ascend-PD-Sibling"  # marks a call between workers, which is never passed on again
SLOTS = 4096  # backends one proxy can know over its life; a slot is never freed, since URLs come back after restarts
_COUNTERS = 2  # per worker and slot: prompt tokens and requests in flight
# per slot: the engine's requests, its KV usage, the proxy's own requests then, read at, fresh until
_READING_LAYOUT = struct.Struct("5d")


class SharedLoad:
    """In-flight tokens and requests per backend, one row per worker, in anonymous shared memory made before the
    fork. Each worker writes only its own row, so no lock is needed on the per-request path; the URL -> slot
    table takes a lock, once per backend."""

    def __init__(self, workers: int):
        self.workers = workers
        integers = SLOTS + workers * SLOTS * _COUNTERS
        self._memory = mmap.mmap(-1, 8 * integers + SLOTS * _READING_LAYOUT.size)  # MAP_SHARED: seen across fork
        cells = memoryview(self._memory)[:8 * integers].cast("q")
        self._keys = cells[:SLOTS]
        self._counts = cells[SLOTS:]
        # engine readings: one worker polls the engines' /metrics and writes here, every worker routes on them
        self._readings_at = 8 * integers
        self._lock = multiprocessing.Lock()
        self._slots: dict[str, int] = {}
        self.worker = 0

    def slot(self, url: str) -> int:
        known = self._slots.get(url)
        if known is not None:
            return known
        key = int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "big", signed=True) or 1
        with self._lock:
            index = key % SLOTS
            for _ in range(SLOTS):
                if self._keys[index] in (0, key):
                    self._keys[index] = key
                    self._slots[url] = index
                    return index
                index = (index + 1) % SLOTS
        raise RuntimeError(f"the proxy has seen more than {SLOTS} backends; restart it")

    def add(self, slot: int, tokens: int, requests: int) -> None:
        base = (self.worker * SLOTS + slot) * _COUNTERS
        self._counts[base] += tokens
        self._counts[base + 1] += requests

    def totals(self, slot: int) -> tuple[int, int]:
        tokens = requests = 0
        for worker in range(self.workers):
            base = (worker * SLOTS + slot) * _COUNTERS
            tokens += self._counts[base]
            requests += self._counts[base + 1]
        return tokens, requests

    def write_reading(self, slot: int, reading: tuple[float, float, float, float, float]) -> None:
        """(engine requests, KV usage, own requests then, read at, fresh until), times on the host's monotonic
        clock. A reader between two writes may mix two consecutive readings, which routing tolerates."""
        _READING_LAYOUT.pack_into(self._memory, self._readings_at + slot * _READING_LAYOUT.size, *reading)

    def reading(self, slot: int) -> tuple[float, float, float, float, float] | None:
        values = _READING_LAYOUT.unpack_from(self._memory, self._readings_at + slot * _READING_LAYOUT.size)
        return values if values[3] else None  # never read: read-at is still zero

    def forget_worker(self, worker: int) -> None:
        """A worker that died holds no load any more: its row goes back to zero before it is restarted."""
        start = worker * SLOTS * _COUNTERS
        for index in range(start, start + SLOTS * _COUNTERS):
            self._counts[index] = 0


@dataclass
class Siblings:
    """What one worker knows of the others: its index, everyone's private loopback URL, the shared load."""

    worker: int
    private_sockets: list[socket.socket]
    load: SharedLoad

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{s.getsockname()[1]}" for s in self.private_sockets]

    def others(self) -> list[str]:
        return [url for index, url in enumerate(self.urls) if index != self.worker]

    async def tell_all(self, session: aiohttp.ClientSession, method: str, path: str, body: bytes,
                       headers: dict[str, str], timeout: float) -> list[tuple[int, bytes]]:
        """The same call on every other worker, at once; (status, body) of each, status 0 when one did not answer
        within `timeout`."""
        headers = {**headers, SIBLING_HEADER: str(self.worker)}

        async def one(url: str) -> tuple[int, bytes]:
            try:
                async with session.request(method, url + path, data=body, headers=headers,
                                           timeout=aiohttp.ClientTimeout(total=timeout)) as answer:
                    return answer.status, await answer.read()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return 0, b""

        return list(await asyncio.gather(*(one(url) for url in self.others())))


def make_siblings(workers: int) -> tuple[SharedLoad, list[socket.socket]]:
    """Made in the supervisor before the fork: the shared table and one listening loopback socket per worker."""
    sockets = []
    for _ in range(workers):
        private = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        private.bind(("127.0.0.1", 0))
        private.listen(128)
        private.setblocking(False)
        sockets.append(private)
    return SharedLoad(workers), sockets
