"""What the scheduler side tells the worker side each step (vLLM carries it to every worker with the batch)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_pd.deploy.handoff import KVAddress


@dataclass(frozen=True)
class PullRecv:
    """Decode, pull: read `remote_block_ids` of P's request into `local_block_ids` (empty: only tell P to free)."""

    request_id: str
    remote_request_id: str
    peer: KVAddress  # the prefill DP rank that holds the KV
    local_block_ids: list[int]
    remote_block_ids: list[int]
    prefilled_at: float | None = None  # P's wall clock when the prompt was computed, for the exposed transfer


@dataclass(frozen=True)
class PushRecv:
    """Decode, push: announce `local_block_ids` to the prefill ranks of `transfer_id` and wait for their writes."""

    request_id: str
    transfer_id: str
    peer: KVAddress  # the prefill DP rank that writes the KV
    local_block_ids: list[int]
    first_block: int  # index of the first prompt block to receive (earlier ones are local prefix-cache hits)


@dataclass(frozen=True)
class PushSend:
    """Prefill, push: this step computes KV for blocks [first, stop) of the request; write them as layers finish."""

    request_id: str
    transfer_id: str
    block_ids: list[int]  # every block of the request so far
    first: int
    stop: int
    last_step: bool  # the prompt is fully computed after this step


@dataclass
class AscendPDMetadata:
    """One step's instructions (registered as vLLM's KVConnectorMetadata by the connector module)."""

    pull_recv: list[PullRecv] = field(default_factory=list)
    push_recv: list[PushRecv] = field(default_factory=list)
    push_send: list[PushSend] = field(default_factory=list)
    # prefill: requests whose blocks the scheduler now holds for a transfer -> seconds before they are freed anyway
    held: dict[str, float] = field(default_factory=dict)
    # prefill, push: requests the scheduler freed itself (aborted before finishing); drop their transfers
    released: list[str] = field(default_factory=list)
