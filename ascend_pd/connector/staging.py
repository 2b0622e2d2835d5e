"""A registered buffer for head slices that are strided in the cache (NHD with prefill TP below decode TP).

It lives where the caches live (NPU memory on Ascend): the layout kernels read and write it on the device, and the
Transfer Engine moves it like any registered cache region."""

from __future__ import annotations

import threading

from ascend_pd.connector.transport import Transport


class StagingTooSmall(Exception):
    """One block of the staged caches does not fit in the staging buffer (kv_connector_extra_config.staging_mib)."""


class StagingBuffer:
    """One per worker; a transfer holds `lock` while it packs, moves and unpacks a chunk of blocks through it, and
    waits for the device before it lets the next chunk overwrite the buffer."""

    def __init__(self, nbytes: int, transport: Transport, like):
        import torch

        self.tensor = torch.empty(nbytes, dtype=torch.uint8, device=like.device)
        self.address = self.tensor.data_ptr()
        self.nbytes = nbytes
        self.lock = threading.Lock()
        transport.register([(self.address, nbytes)])

    def blocks_per_chunk(self, bytes_per_block: int) -> int:
        """How many blocks (of all staged planes together) fit at once."""
        if bytes_per_block > self.nbytes:
            raise StagingTooSmall(f"one block of the staged caches needs {bytes_per_block} bytes, more than the "
                             f"{self.nbytes}-byte staging buffer; raise staging_mib in kv_connector_extra_config")
        return self.nbytes // bytes_per_block

    def view(self, offset: int, nbytes: int, dtype, shape: tuple[int, ...]):
        return self.tensor[offset:offset + nbytes].view(dtype).view(shape)
