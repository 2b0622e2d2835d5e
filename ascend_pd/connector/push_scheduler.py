"""Scheduler side of push mode: D announces its blocks for a transfer id; P streams each prefill step's blocks."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ascend_pd.connector.metadata import AscendPDMetadata, PushRecv, PushSend
from ascend_pd.connector.scheduler import SchedulerSide, blocks_to_receive, prompt_tokens_to_load
from ascend_pd.deploy import handoff

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)


def _to_send(params: dict[str, Any] | None) -> handoff.PushToPrefill | None:
    """Prefill side: the transfer a request's KV is written for, or None."""
    if not handoff.sends_kv(params):
        return None
    try:
        return handoff.decode(params, handoff.PushToPrefill)
    except handoff.HandoffError as error:
        logger.warning("%s: %s; no decode instance gets this KV", error, params)
        return None


@dataclass
class _Outgoing:
    """A prefill request whose KV is pushed: its blocks so far and whether the prompt is fully computed."""

    transfer_id: str
    num_prompt_tokens: int
    block_ids: list[int] = field(default_factory=list)
    prefilled: bool = False


class PushScheduler(SchedulerSide):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._outgoing: dict[str, _Outgoing] = {}

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        if self.received(request.kv_transfer_params, handoff.PushToDecode) is None:
            return 0, False
        return prompt_tokens_to_load(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        params = request.kv_transfer_params
        if request.request_id not in self._outgoing and (sent := _to_send(params)) is not None:
            self._outgoing[request.request_id] = _Outgoing(sent.transfer_id, request.num_prompt_tokens)
        elif (pushed := self.received(params, handoff.PushToDecode)) is not None:
            local, first = blocks_to_receive(request, blocks, num_external_tokens, self.block_size)
            self._queue_recv(request, pushed, local, first_block=first)
            handoff.stop_receiving(params)

    def _queue_recv(self, request: Request, pushed: handoff.PushToDecode, local: list[int], first_block: int) -> None:
        self._next.push_recv.append(PushRecv(request_id=request.request_id, transfer_id=pushed.transfer_id,
                                             peer=pushed.prefill, local_block_ids=list(local),
                                             first_block=first_block))

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> AscendPDMetadata:
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            outgoing = self._outgoing.get(new.req_id)
            if outgoing is not None:
                outgoing.block_ids = list(new.block_ids[0])
                # Prefix-cache hits are already in the cache: the first step sends them too.
                self._queue_send(new.req_id, outgoing, 0, new.num_computed_tokens + scheduled[new.req_id])
        cached = scheduler_output.scheduled_cached_reqs
        for index, req_id in enumerate(cached.req_ids):
            outgoing = self._outgoing.get(req_id)
            if outgoing is None or outgoing.prefilled:
                continue
            if cached.new_block_ids[index] is not None:
                outgoing.block_ids.extend(cached.new_block_ids[index][0])
            start = cached.num_computed_tokens[index]
            self._queue_send(req_id, outgoing, start, start + scheduled.get(req_id, 0))
        return self.take_metadata()

    def _queue_send(self, req_id: str, outgoing: _Outgoing, start_token: int, end_token: int) -> None:
        end_token = min(end_token, outgoing.num_prompt_tokens)
        if end_token <= start_token:
            return
        outgoing.prefilled = end_token >= outgoing.num_prompt_tokens
        self._next.push_send.append(PushSend(
            request_id=req_id, transfer_id=outgoing.transfer_id, block_ids=list(outgoing.block_ids),
            first=start_token // self.block_size, stop=-(-end_token // self.block_size),
            last_step=outgoing.prefilled))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        from vllm.v1.request import RequestStatus

        params = request.kv_transfer_params
        pushed = self.received(params, handoff.PushToDecode)
        if pushed is not None:
            # Decode side, finished before blocks were allocated: tell the senders not to wait for us.
            self._queue_recv(request, pushed, [], first_block=0)
            handoff.stop_receiving(params)
            return False, None
        outgoing = self._outgoing.pop(request.request_id, None)
        if outgoing is None:
            return False, None
        normal_end = request.status in (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)
        if normal_end and outgoing.prefilled and block_ids:
            self.hold(request.request_id, self.config.kv_load_timeout_s)
            return True, None
        self._next.released.append(request.request_id)
        return False, None
