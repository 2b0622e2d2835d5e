"""Scheduler side of the connector: the mode-independent part, and the choice of the pull or push state machine."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

from ascend_pd.connector.config import ConnectorConfig
from ascend_pd.connector.metadata import AscendPDMetadata
from ascend_pd.deploy import handoff

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)

Received = TypeVar("Received", bound=handoff.FromPrefill)


class SchedulerSide:
    """State shared by both modes: where this instance listens and what the next step's metadata holds."""

    def __init__(self, config: ConnectorConfig, host: str, dp_rank: int, block_size: int):
        self.config = config
        self.host = host
        self.dp_rank = dp_rank
        self.block_size = block_size
        self._next = AscendPDMetadata()
        # Requests whose blocks vLLM keeps because request_finished said so, until finished_sending names them.
        self._held: set[str] = set()
        self._held_reported = 0  # stats_prometheus.py creates the gauge at 0

    @property
    def address(self) -> handoff.KVAddress:
        """Where this DP rank's connector listens (the side channel of its TP rank 0; peers add the TP rank)."""
        return handoff.KVAddress(engine_id=self.config.engine_id, host=self.host,
                                 port=self.config.side_channel_port(self.dp_rank, 0),
                                 tp_size=self.config.local.tp_size, dp_rank=self.dp_rank,
                                 rank_hosts=self.config.rank_hosts)

    def take_metadata(self) -> AscendPDMetadata:
        metadata, self._next = self._next, AscendPDMetadata()
        return metadata

    def hold(self, request_id: str, timeout_s: float) -> None:
        """Keep a finished request's blocks for the workers (a read by D, or a push still sending): they report it in
        finished_sending when done or after `timeout_s`, and vLLM frees the blocks then. request_finished returns
        True after this."""
        self._next.held[request_id] = timeout_s
        self._held.add(request_id)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        """vLLM frees the blocks of every request in finished_sending right after this call."""
        self._held.difference_update(connector_output.finished_sending or ())

    @property
    def held_requests(self) -> int:
        return len(self._held)

    def take_held_change(self) -> int | None:
        """The held count if it changed since the last call that returned one (0 included), else None: a level
        reported on change, so the gauge follows it without a report every step."""
        if len(self._held) == self._held_reported:
            return None
        self._held_reported = len(self._held)
        return self._held_reported

    def received(self, params: dict[str, Any] | None, kind: type[Received]) -> Received | None:
        """Decode side: what P handed a request that still waits for KV from P, or None. A request whose P cannot
        be read from (a key missing or mistyped, or another TP size than this connector maps heads from: validation
        APD415 keeps one per role) stops waiting, with a log line, before any block waits on it: vLLM computes its
        prompt here."""
        if not handoff.receives_kv(params):
            return None
        try:
            received = handoff.decode(params, kind)
        except handoff.HandoffError as error:
            logger.warning("%s: %s; computing locally", error, params)
            handoff.stop_receiving(params)
            return None
        peer = received.prefill
        expected = self.config.prefill.tp_size
        if peer.tp_size != expected or peer.rank_hosts and len(peer.rank_hosts) != peer.tp_size:
            logger.warning("prefill %s has tp %d (%d rank hosts), this instance maps KV heads from tp %d; "
                           "computing locally", peer.describe(), peer.tp_size, len(peer.rank_hosts), expected)
            handoff.stop_receiving(params)
            return None
        return received

    # The vLLM scheduler-side interface; each mode implements it.
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        raise NotImplementedError

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        raise NotImplementedError

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> AscendPDMetadata:
        return self.take_metadata()

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        raise NotImplementedError


def prompt_tokens_to_load(request: Request, num_computed_tokens: int) -> tuple[int, bool]:
    """Every prompt token not already computed locally, loaded asynchronously."""
    count = request.num_prompt_tokens - num_computed_tokens
    return (count, True) if count > 0 else (0, False)


def prompt_blocks(num_prompt_tokens: int, block_size: int) -> int:
    """Blocks that hold a prompt's KV (the last one may be partly filled)."""
    return -(-num_prompt_tokens // block_size)


def blocks_to_receive(request: Request, blocks: KVCacheBlocks, num_external_tokens: int,
                      block_size: int) -> tuple[list[int], int]:
    """D's blocks that receive P's prompt KV, and the prompt block index of the first one. Local prefix-cache hits
    are the request's first blocks; lookahead (draft) blocks after the prompt receive nothing."""
    local = blocks.get_unhashed_block_ids() if num_external_tokens > 0 else []
    first = len(blocks.blocks[0]) - len(local)
    return local[:prompt_blocks(request.num_prompt_tokens, block_size) - first], first


def make_scheduler_side(config: ConnectorConfig, host: str, dp_rank: int, block_size: int) -> SchedulerSide:
    if config.mode == "pull":
        from ascend_pd.connector.pull_scheduler import PullScheduler
        return PullScheduler(config, host, dp_rank, block_size)
    from ascend_pd.connector.push_scheduler import PushScheduler
    return PushScheduler(config, host, dp_rank, block_size)
