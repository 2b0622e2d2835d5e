"""Write a file so that a reader (another process, or this one after a crash) sees the old text or the new, never a
part: write a temporary file beside it, flush it to disk, rename it over the old one, flush the directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str | Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically and durably; `mode` sets the new file's permissions (before any byte
    is written, so a secret is never readable by others)."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(descriptor, _mode_for(path) if mode is None else mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _mode_for(path: Path) -> int:
    """The permissions a plain write would give: the old file's, or the default under this process's umask (the
    temporary file starts at 0600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask, read without changing it (os.umask would, for a moment, in every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022
