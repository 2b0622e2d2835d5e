"""Memory registration with a real Mooncake Transfer Engine: what the Ascend transport's region limit refuses, and
that the staging buffer lives where the caches live."""

from __future__ import annotations

import pytest
import torch

from ascend_pd.connector.staging import StagingBuffer
from ascend_pd.connector.transport import ASCEND_REGION_LIMIT, Transport, region_limit

pytestmark = pytest.mark.integration


@pytest.fixture
def transport():
    engine = Transport("127.0.0.1", "tcp")
    yield engine
    engine.close()


def test_registration_over_the_ascend_region_limit_is_refused_before_anything_is_registered(transport):
    buffers = [torch.zeros(4096, dtype=torch.uint8) for _ in range(3)]
    with pytest.raises(RuntimeError, match="need 3 registered memory regions, more than the 2"):
        transport.register([(b.data_ptr(), b.numel()) for b in buffers], limit=2)
    assert transport.register([(b.data_ptr(), b.numel()) for b in buffers[:2]], limit=2) == 2


def test_only_the_ascend_transport_has_a_region_limit():
    assert region_limit("ascend") == ASCEND_REGION_LIMIT == 256
    assert region_limit("tcp") is None and region_limit("rdma") is None


def test_the_staging_buffer_is_allocated_on_the_caches_device_not_in_pageable_host_memory(transport):
    """On an NPU the layout kernels read and write it on the device, where a pageable host buffer is no use to
    them. The meta device stands in for a device other than the host."""
    assert StagingBuffer(1 << 12, transport, like=torch.empty(4, 16, 2, 8, device="meta")).tensor.is_meta
    assert StagingBuffer(1 << 12, transport, like=torch.empty(4, 16, 2, 8)).tensor.device == torch.device("cpu")
