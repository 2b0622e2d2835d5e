"""A CPU twin of `torch.npu` (what torch_npu adds to torch) that keeps the NPU's semantics, not only its interface.

`install()` puts this module at `torch.npu` and registers stand-ins of the AscendC ops (`torch.ops.ascend_pd.*`)
that ascend_pd.kernels dispatches to on a device, so the connector's real code runs its device path here.

What it keeps from the NPU, so that code that forgets a synchronize or a set_device fails under it:
- Device work is queued, not run. An op runs, in its stream's order, only when something waits for it:
  `Event.synchronize()` of an event recorded after it on its stream, `Stream.synchronize()`, or `synchronize()` of
  its device. Until then the memory it writes holds what it held before, for the host and for the Transfer Engine
  alike. (A real NPU may finish earlier; never running early is the schedule that exposes every missing wait.)
- Each thread has a current device, 0 until it calls `set_device`; `synchronize()` without an argument waits for
  the calling thread's current device only, and `Event.record()` records on that device's stream.
- Each thread has its own stream per device. vllm-ascend runs the forward pass on streams of its own (graph capture,
  multistream), so work another thread queues is ordered against it only by an explicit wait.
- An op runs on the device of the memory it touches (`place()` says which device a host tensor stands for),
  otherwise on the calling thread's current device, as torch_npu's device guard does.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from contextlib import contextmanager
from typing import Callable

import torch

_lock = threading.RLock()
_local = threading.local()
_streams: dict[tuple[int, int], "Stream"] = {}
_placed: list[tuple[int, int, int]] = []  # (start, end, device) of host memory standing for device memory
_DEVICES = 16


def _index(device) -> int:
    if isinstance(device, torch.device):
        device = device.index or 0
    if isinstance(device, str):
        device = int(device.split(":")[1]) if ":" in device else 0
    if not 0 <= int(device) < _DEVICES:
        raise RuntimeError(f"twin NPU: invalid device {device}")
    return int(device)


# ---- the torch.npu interface ----
def is_available() -> bool:
    return True


def device_count() -> int:
    return _DEVICES


def set_device(device) -> None:
    _local.device = _index(device)


def current_device() -> int:
    return getattr(_local, "device", 0)


class Stream:
    """One queue of device work; ops run in order when waited for."""

    def __init__(self, device=None):
        self.device = current_device() if device is None else _index(device)
        self._ops: deque[Callable[[], None]] = deque()
        self.launched = 0
        self.done = 0

    def _launch(self, op: Callable[[], None]) -> None:
        with _lock:
            self._ops.append(op)
            self.launched += 1

    def _run_until(self, mark: int) -> None:
        with _lock:
            while self.done < mark:
                self._ops.popleft()()
                self.done += 1

    def synchronize(self) -> None:
        self._run_until(self.launched)

    def query(self) -> bool:
        return self.done >= self.launched

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        """Later work on this stream runs after the event's work."""
        self._launch(event.synchronize)


def current_stream(device=None) -> Stream:
    index = current_device() if device is None else _index(device)
    key = (index, threading.get_ident())
    with _lock:
        if key not in _streams:
            _streams[key] = Stream(index)
        return _streams[key]


@contextmanager
def stream(s: Stream):
    """Work of the block goes to `s` (only its device's stream is replaced for this thread)."""
    key = (s.device, threading.get_ident())
    with _lock:
        previous = _streams.get(key)
        _streams[key] = s
    try:
        yield s
    finally:
        with _lock:
            if previous is None:
                del _streams[key]
            else:
                _streams[key] = previous


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self._stream: Stream | None = None
        self._mark = 0

    def record(self, stream: Stream | None = None) -> None:
        self._stream = stream or current_stream()
        self._mark = self._stream.launched

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream._run_until(self._mark)

    def query(self) -> bool:
        return self._stream is None or self._stream.done >= self._mark

    def wait(self, stream: Stream | None = None) -> None:
        (stream or current_stream()).wait_event(self)


def synchronize(device=None) -> None:
    """Wait for all work queued on one device (the calling thread's current one by default), by every thread."""
    index = current_device() if device is None else _index(device)
    with _lock:
        streams = [s for (d, _), s in _streams.items() if d == index]
    for s in streams:
        s.synchronize()


# ---- what the twin adds for tests ----
def place(tensor: torch.Tensor, device: int) -> torch.Tensor:
    """Let a host tensor stand for memory of `device` (its whole storage)."""
    storage = tensor.untyped_storage()
    with _lock:
        _placed.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes(), _index(device)))
    return tensor


def device_of(*tensors: torch.Tensor) -> int:
    for tensor in tensors:
        address = tensor.data_ptr()
        with _lock:
            for start, end, device in _placed:
                if start <= address < end:
                    return device
    return current_device()


def launch(op: Callable[[], None], *tensors: torch.Tensor) -> None:
    """Queue a device op that works on `tensors` (as the model's cache write or an AscendC kernel is queued)."""
    current_stream(device_of(*tensors))._launch(op)


def pending() -> int:
    """Ops queued on any stream that have not run."""
    with _lock:
        return sum(s.launched - s.done for s in _streams.values())


def reset() -> None:
    """Forget placements, queued work and the calling thread's device (between tests in one process)."""
    with _lock:
        _streams.clear()
        _placed.clear()
    _local.device = 0


# ---- the AscendC ops, queued on the device ----
_library: torch.library.Library | None = None


def _register_ops() -> None:
    """torch.ops.ascend_pd.* with the schemas of kernels_ascendc/npu/torch_binding.cpp, queued like a launch."""
    global _library
    if _library is not None:
        return
    from ascend_pd.kernels import cpu

    _library = torch.library.Library("ascend_pd", "DEF")
    for schema in ("gather_heads(Tensor cache, Tensor block_ids, int head_start, int head_count) -> Tensor",
                   "gather_heads_into(Tensor cache, Tensor block_ids, int head_start, int head_count, "
                   "Tensor(a!) out) -> ()",
                   "scatter_heads(Tensor(a!) cache, Tensor block_ids, int head_start, Tensor packed) -> ()",
                   "block_transpose(Tensor(a!) cache, Tensor block_ids, int split) -> ()"):
        _library.define(schema)

    def gather_into(cache, ids, head_start, head_count, out):
        ids = ids.long()
        launch(lambda: out.copy_(cpu.gather_heads(cache, ids, head_start, head_count)), cache, out)

    def gather(cache, ids, head_start, head_count):
        out = torch.zeros((ids.numel(), cache.shape[1], head_count, cache.shape[3]), dtype=cache.dtype)
        gather_into(cache, ids, head_start, head_count, out)
        return out

    def scatter(cache, ids, head_start, packed):
        ids = ids.long()
        launch(lambda: cpu.scatter_heads(cache, ids, head_start, packed), cache, packed)

    def transpose(cache, ids, split):
        ids = ids.long()
        launch(lambda: cpu.block_transpose(cache, ids, split), cache)

    for name, fn in (("gather_heads", gather), ("gather_heads_into", gather_into), ("scatter_heads", scatter),
                     ("block_transpose", transpose)):
        _library.impl(name, fn, "CPU")


def install() -> None:
    """Become torch.npu and make ascend_pd.kernels take its device path (the AscendC ops) for every tensor."""
    import ascend_pd.kernels.ops as ops

    _register_ops()
    torch.npu = sys.modules[__name__]
    ops.use_ascendc = lambda tensor: True
