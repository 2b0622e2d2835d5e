"""A map for entries a peer's message creates (a ReadDone, an early PushReady): each lives at most ttl_s, and past
`cap` entries the oldest go first, so late, repeated or bogus messages cannot grow a worker's memory."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    def __init__(self, ttl_s: float, cap: int):
        self.ttl_s, self.cap = ttl_s, cap
        self._entries: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def put(self, key: str, value: V, now: float) -> None:
        """Keep `value` under `key` from `now` (a key put again starts its life anew)."""
        self._entries.pop(key, None)
        self._entries[key] = (now, value)
        while len(self._entries) > self.cap:
            self._entries.popitem(last=False)

    def get(self, key: str) -> V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[1]

    def pop(self, key: str) -> V | None:
        entry = self._entries.pop(key, None)
        return None if entry is None else entry[1]

    def expire(self, now: float) -> None:
        """Drop the entries put ttl_s or longer before `now` (the oldest are first)."""
        while self._entries:
            put_at, _ = next(iter(self._entries.values()))
            if put_at + self.ttl_s > now:
                return
            self._entries.popitem(last=False)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
