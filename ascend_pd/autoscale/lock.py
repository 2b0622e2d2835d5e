"""One autoscaler per deployment: a second one would interleave its table generations, rollouts and rewrites of the
deployment file with the first's. The lock is an flock on a file in the bundle, held for the process's life; the
kernel lets it go when the process ends, however it ends, so a crash leaves nothing to clean up."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

from ascend_pd.errors import InputError

LOCK_FILE = "autoscale.lock"  # in the bundle, beside deployment.yaml and the backend table


class AutoscalerLock:
    """Held from construction until close() or the end of the process; the file names its holder."""

    def __init__(self, deployment_file: Path):
        self.path = deployment_file.parent / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the launchers it runs
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self._fd, 200).decode(errors="replace").strip() or "a process that has not said"
            os.close(self._fd)
            raise InputError(f"another autoscaler runs this deployment: {holder} holds {self.path}",
                             file=str(deployment_file), field="--deployment",
                             fix="let that one run, or stop it (kill its pid) first; the lock goes with its process") \
                from None
        except OSError:
            os.close(self._fd)
            raise
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def close(self) -> None:
        os.close(self._fd)  # the flock goes with the last descriptor of this open
