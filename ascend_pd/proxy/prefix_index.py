"""A bounded, approximate prefix index: chained hashes of fixed-size prompt blocks -> the backend last sent them.

It records where prefixes were routed, not what a backend still caches, so it is a hint. Memory is bounded by
`max_entries` (least recently used entries go first) and the work per prompt by `max_blocks`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Collection, Iterator


class PrefixIndex:
    def __init__(self, block_chars: int = 128, max_entries: int = 100_000, max_blocks: int = 256):
        self.block_chars = block_chars
        self.max_entries = max_entries
        self.max_blocks = max_blocks
        self._owner: OrderedDict[int, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owner)

    def _block_hashes(self, prompt: str) -> Iterator[int]:
        digest = 0
        whole_blocks = min(len(prompt) // self.block_chars, self.max_blocks)
        for start in range(0, whole_blocks * self.block_chars, self.block_chars):
            digest = hash((digest, prompt[start:start + self.block_chars]))
            yield digest

    def longest_match(self, prompt: str, among: Collection[str]) -> str | None:
        """The backend in `among` that was sent the longest prefix of `prompt` (whole blocks), or None."""
        best = None
        for digest in self._block_hashes(prompt):
            owner = self._owner.get(digest)
            if owner is None:
                break
            if owner in among:
                best = owner
        return best

    def record(self, prompt: str, url: str) -> None:
        for digest in self._block_hashes(prompt):
            self._owner[digest] = url
            self._owner.move_to_end(digest)
        while len(self._owner) > self.max_entries:
            self._owner.popitem(last=False)
