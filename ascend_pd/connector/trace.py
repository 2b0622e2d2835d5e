"""An opt-in timeline of one worker's KV movement: with ASCEND_PD_KV_TRACE=DIR set, each worker appends one JSON line
per event (a layer saved on P, a write or read batch, a request's KV whole on D) with the wall-clock time, to
DIR/<engine_id>-rank<tp_rank>.jsonl. tools/bench_overlap.py draws its timeline from these files; nothing reads
them in serving. Off (no file, no cost but a None check) when the variable is unset."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

ENV = "ASCEND_PD_KV_TRACE"


class Trace:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", buffering=1)  # line-buffered: a killed engine loses at most a line
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, engine_id: str, tp_rank: int) -> Trace | None:
        directory = os.environ.get(ENV)
        return cls(Path(directory) / f"{engine_id}-rank{tp_rank}.jsonl") if directory else None

    def event(self, kind: str, at: float | None = None, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "t": time.time() if at is None else at, **fields})
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()
