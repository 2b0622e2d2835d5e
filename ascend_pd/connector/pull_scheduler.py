"""Scheduler side of pull mode: P keeps finished prompts' blocks and names them; D schedules reads of them."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ascend_pd.connector.metadata import PullRecv
from ascend_pd.connector.scheduler import SchedulerSide, blocks_to_receive, prompt_blocks, prompt_tokens_to_load
from ascend_pd.deploy import handoff

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)


class PullScheduler(SchedulerSide):

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        if self.received(request.kv_transfer_params, handoff.PullToDecode) is None:
            return 0, False
        return prompt_tokens_to_load(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        pulled = self.received(request.kv_transfer_params, handoff.PullToDecode)
        if pulled is None:
            return
        self._queue_recv(request, pulled, *blocks_to_receive(request, blocks, num_external_tokens, self.block_size))
        handoff.stop_receiving(request.kv_transfer_params)  # the read is scheduled once, even if vLLM calls again

    def _queue_recv(self, request: Request, pulled: handoff.PullToDecode, local: list[int], first: int) -> None:
        """Read P's prompt blocks [first, first + len(local)) into `local`; D's lookahead (draft) blocks after the
        prompt are not in `local`, and P sent only its prompt blocks."""
        remote = pulled.remote_block_ids[first:first + len(local)]
        if len(remote) < len(local):
            logger.warning("request %s: prefill sent %d blocks for a %d-token prompt; the missing ones are "
                           "computed locally", request.request_id, len(pulled.remote_block_ids),
                           request.num_prompt_tokens)
            local = local[:len(remote)]
        self._next.pull_recv.append(PullRecv(
            request_id=request.request_id, remote_request_id=pulled.remote_request_id, peer=pulled.prefill,
            local_block_ids=list(local), remote_block_ids=remote, prefilled_at=pulled.remote_prefilled_at))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        pulled = self.received(params, handoff.PullToDecode)
        if pulled is not None:
            # Decode side, finished (aborted) before blocks were allocated: P must still hear it can free.
            self._queue_recv(request, pulled, [], 0)
            handoff.stop_receiving(params)
            return False, None
        if not handoff.sends_kv(params):
            return False, None
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED) \
                or not block_ids:
            return False, None
        self.hold(request.request_id, self.config.abort_timeout_s)
        return True, handoff.encode(handoff.pulled(
            self.address, request_id=request.request_id,
            # The prompt's blocks only: with a draft model P also holds lookahead blocks, which carry no prompt KV.
            block_ids=list(block_ids[:prompt_blocks(request.num_prompt_tokens, self.block_size)]),
            block_size=self.block_size, num_tokens=request.num_computed_tokens,
            # D measures the transfer it waits for after this moment (vllm:ascend_pd_kv_exposed_seconds)
            prefilled_at=time.time()))
