"""Scheduler side of pull mode: P keeps finished prompts' blocks and names them; D schedules reads of them."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ascend_pd.connector.metadata import PullRecv
from ascend_pd.connector.scheduler import SchedulerSide, blocks_to_receive, prompt_blocks, prompt_tokens_to_load

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)


def _wall_clock(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _wants_pull(params: dict | None) -> bool:
    return bool(params and params.get("do_remote_prefill") and params.get("remote_block_ids"))


class PullScheduler(SchedulerSide):

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        if not _wants_pull(request.kv_transfer_params) or not self.takes_peer(request.kv_transfer_params):
            return 0, False
        return prompt_tokens_to_load(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if not _wants_pull(params):
            return
        self._queue_recv(request, *blocks_to_receive(request, blocks, num_external_tokens, self.block_size))
        params["do_remote_prefill"] = False  # the read is scheduled once, even if vLLM calls again

    def _queue_recv(self, request: Request, local: list[int], first: int) -> None:
        """Read P's prompt blocks [first, first + len(local)) into `local`; D's lookahead (draft) blocks after the
        prompt are not in `local`, and P sent only its prompt blocks."""
        params = request.kv_transfer_params
        peer = self.peer_of(params)
        if peer is None:
            return
        remote = list(params["remote_block_ids"])[first:first + len(local)]
        if len(remote) < len(local):
            logger.warning("request %s: prefill sent %d blocks for a %d-token prompt; the missing ones are "
                           "computed locally", request.request_id, len(params["remote_block_ids"]),
                           request.num_prompt_tokens)
            local = local[:len(remote)]
        self._next.pull_recv.append(PullRecv(
            request_id=request.request_id, remote_request_id=str(params.get("remote_request_id", "")),
            peer=peer, local_block_ids=list(local), remote_block_ids=remote,
            prefilled_at=_wall_clock(params.get("remote_prefilled_at"))))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        if not params:
            return False, None
        if _wants_pull(params):
            # Decode side, finished (aborted) before blocks were allocated: P must still hear it can free.
            self._queue_recv(request, [], 0)
            params["do_remote_prefill"] = False
            return False, None
        if not params.get("do_remote_decode"):
            return False, None
        if request.status not in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED) \
                or not block_ids:
            return False, None
        self.hold(request.request_id, self.config.abort_timeout_s)
        return True, {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": self.config.engine_id,
            "remote_request_id": request.request_id,
            "remote_host": self.host,
            "remote_port": self.side_channel_port,
            "remote_tp_size": self.config.local.tp_size,
            **({"remote_rank_hosts": list(self.config.rank_hosts)} if self.config.rank_hosts else {}),
            # The prompt's blocks only: with a draft model P also holds lookahead blocks, which carry no prompt KV.
            "remote_block_ids": list(block_ids[:prompt_blocks(request.num_prompt_tokens, self.block_size)]),
            "remote_block_size": self.block_size,
            "remote_num_tokens": request.num_computed_tokens,
            # D measures the transfer it waits for after this moment (vllm:ascend_pd_kv_exposed_seconds)
            "remote_prefilled_at": time.time(),
        }
