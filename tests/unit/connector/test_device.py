"""CacheDevice on the NPU twin: the twin keeps the NPU's asynchrony and per-thread devices, and the connector's
waits are the ones that make device writes visible."""

from __future__ import annotations

import threading

import pytest
import torch

import torch_npu_twin as npu
from ascend_pd.connector.device import CacheDevice


@pytest.fixture(autouse=True)
def clean_twin():
    npu.reset()
    yield
    npu.reset()


def cache_on(device: int) -> torch.Tensor:
    return npu.place(torch.zeros(8), device)


def in_thread(fn):
    result = {}
    thread = threading.Thread(target=lambda: result.update(value=fn()))
    thread.start()
    thread.join(10)
    return result.get("value")


def test_a_device_write_is_invisible_until_an_event_recorded_after_it_is_waited_for():
    npu.set_device(1)
    cache = cache_on(1)
    device = CacheDevice(npu, npu.current_device())
    npu.launch(lambda: cache.fill_(3), cache)
    written = device.mark()
    npu.launch(lambda: cache.add_(1), cache)  # queued after the mark: not waited for
    assert torch.equal(cache, torch.zeros(8))
    device.wait(written)
    assert torch.equal(cache, torch.full((8,), 3.0)) and npu.pending() == 1


def test_a_new_thread_works_on_device_0_until_it_binds_the_caches_device():
    npu.set_device(1)
    device = CacheDevice(npu, npu.current_device())
    assert in_thread(npu.current_device) == 0
    assert in_thread(lambda: (device.bind_thread(), npu.current_device())[1]) == 1


def test_drain_waits_only_for_the_calling_threads_own_work_on_its_current_device():
    cache = cache_on(1)
    device = CacheDevice(npu, 1)

    def queue_then_drain(bind: bool):
        if bind:
            device.bind_thread()
        npu.launch(lambda: cache.add_(1), cache)
        device.drain()
        return cache.clone()

    assert torch.equal(in_thread(lambda: queue_then_drain(bind=False)), torch.zeros(8))  # drained device 0
    npu.synchronize(1)
    assert torch.equal(in_thread(lambda: queue_then_drain(bind=True)), torch.full((8,), 2.0))


def test_synchronize_of_a_device_runs_every_threads_work_on_it_and_nothing_elsewhere():
    near, far = cache_on(1), cache_on(2)
    in_thread(lambda: npu.launch(lambda: near.fill_(5), near))
    npu.launch(lambda: far.fill_(7), far)
    npu.synchronize(1)
    assert torch.equal(near, torch.full((8,), 5.0)) and torch.equal(far, torch.zeros(8))


def test_on_the_host_every_call_is_a_no_op():
    device = CacheDevice.host()
    device.bind_thread()
    device.wait(device.mark())
    device.drain()
    assert device.mark() is None


def test_the_caches_device_is_the_one_vllms_worker_thread_selected(monkeypatch):
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    npu.set_device(3)
    device = CacheDevice.of_current_thread()
    assert (device.module, device.index) == (npu, 3)
    monkeypatch.delattr(torch, "npu")
    assert CacheDevice.of_current_thread().module is None
