"""The metaserver of vllm-ascend's layerwise connector: D posts its block coordinates here, the waiting request
resumes and dispatches P with them."""

from __future__ import annotations

import asyncio
from typing import Any

from ascend_pd.proxy.ids import REQUEST_ID


class Metaserver:
    def __init__(self):
        self._waiting: dict[str, asyncio.Future] = {}

    def expect(self, request_id: str) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.cancel()

    def deliver(self, payload: dict[str, Any]) -> bool:
        """Hand D's kv_transfer_params to the request they belong to; False if no request is waiting for them."""
        match = REQUEST_ID.search(str(payload.get("request_id", "")))
        future = self._waiting.get(match.group()) if match else None
        if future is None or future.done():
            return False
        future.set_result(payload)
        return True

    def __len__(self) -> int:
        return len(self._waiting)
