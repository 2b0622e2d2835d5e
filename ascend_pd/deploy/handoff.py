"""The KV handoff contract between the proxy, the prefill instance (P) and the decode instance (D): where one DP
rank's KV connector listens, the kv_transfer_params each of them hands the next, and the connector settings render
writes for both sides. Every key name and default is typed here once.

vLLM carries kv_transfer_params as a plain JSON dict. `encode` turns a message into one; `decode` reads one back,
ignoring keys it does not know (a newer peer's, or those vLLM adds itself) and raising HandoffError, which names the
key, for a missing or mistyped one: the connector then computes the prompt locally."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

# Where AscendPDConnector reads both sides' parallel shapes in kv_connector_extra_config. vllm-ascend reads the
# top-level "prefill" and "decode" keys itself and refuses shapes it does not serve, so ours live apart.
SHAPES_KEY = "ascend_pd_shapes"
# Seconds P keeps the blocks of a finished request that no decode instance has read (vllm-ascend's guides use 480).
ABORT_TIMEOUT_S = 480


class KVAddress(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the KV connector of one DP rank listens: deployment.yaml gives it for every rank, the backend table
    keeps it, push mode hands a prefill rank's to D, and D's connector names in it the P that holds or sends a
    request's KV."""

    engine_id: str
    host: str
    port: int  # side channel of TP rank 0 of this DP rank; TP rank r listens on port + r
    tp_size: int = 1
    dp_rank: int = 0
    rank_hosts: tuple[str, ...] = ()  # each TP rank's host when the ranks span nodes; empty: all on `host`

    def address(self, rank: int) -> tuple[str, int]:
        """Where TP rank `rank` listens."""
        return (self.rank_hosts[rank] if self.rank_hosts else self.host), self.port + rank

    def describe(self) -> str:
        """How logs and errors name it: engine id and side-channel address."""
        return f"{self.engine_id} ({self.host}:{self.port})"


class HandoffError(ValueError):
    """kv_transfer_params this side cannot use: a key missing or of the wrong type."""


class ToPrefill(msgspec.Struct, kw_only=True):
    """Proxy to P, pull: prefill the prompt and keep its KV for a decode instance."""

    do_remote_decode: bool = True


class PushToPrefill(ToPrefill, kw_only=True):
    """Proxy to P, push: as in pull, and write the KV into the blocks D announces for this transfer id."""

    transfer_id: str


class FromPrefill(msgspec.Struct, kw_only=True):
    """What D reads in either mode: the prompt's KV comes from the prefill rank these keys name."""

    do_remote_prefill: bool = True
    remote_engine_id: str
    remote_host: str
    remote_port: int
    remote_tp_size: int
    remote_dp_rank: int = 0
    remote_rank_hosts: tuple[str, ...] = ()

    @property
    def prefill(self) -> KVAddress:
        return KVAddress(engine_id=self.remote_engine_id, host=self.remote_host, port=self.remote_port,
                         tp_size=self.remote_tp_size, dp_rank=self.remote_dp_rank, rank_hosts=self.remote_rank_hosts)


class PullToDecode(FromPrefill, kw_only=True):
    """P to D through the proxy, pull: P's answer, which the proxy hands D verbatim; the prompt's blocks P holds."""

    do_remote_decode: bool = False  # D hands nothing on, as with vLLM's own connectors
    remote_request_id: str  # what D names when it tells P the read is done
    remote_block_ids: Annotated[list[int], msgspec.Meta(min_length=1)]  # the prompt's, never draft lookahead blocks
    # Reported, not needed: D compares block sizes in its handshake with P, where a mismatch fails with both named.
    remote_block_size: int | None = None
    remote_num_tokens: int | None = None
    remote_prefilled_at: float | None = None  # P's wall clock at the end of prefill: the exposed transfer starts here


class PushToDecode(FromPrefill, kw_only=True):
    """Proxy to D, push: announce blocks to the prefill rank these keys name, for the transfer id P's half carries."""

    transfer_id: str


class LayerwiseToDecode(msgspec.Struct, kw_only=True):
    """Proxy to D, vllm-ascend's MooncakeLayerwiseConnector: D posts its block coordinates to `metaserver`, and the
    proxy hands them to P verbatim."""

    do_remote_decode: bool = False
    do_remote_prefill: bool = True
    metaserver: str


def _remote(prefill: KVAddress) -> dict[str, Any]:
    return {"remote_engine_id": prefill.engine_id, "remote_host": prefill.host, "remote_port": prefill.port,
            "remote_tp_size": prefill.tp_size, "remote_dp_rank": prefill.dp_rank,
            "remote_rank_hosts": prefill.rank_hosts}


def push_to_decode(prefill: KVAddress, transfer_id: str) -> PushToDecode:
    return PushToDecode(transfer_id=transfer_id, **_remote(prefill))


def pulled(prefill: KVAddress, *, request_id: str, block_ids: list[int], block_size: int, num_tokens: int,
           prefilled_at: float) -> PullToDecode:
    return PullToDecode(remote_request_id=request_id, remote_block_ids=block_ids, remote_block_size=block_size,
                        remote_num_tokens=num_tokens, remote_prefilled_at=prefilled_at, **_remote(prefill))


# The two flags say which half of a handoff a request is. The connector reads them on the dict vLLM keeps before it
# decodes the rest, and clears D's there once the request is taken up.
def sends_kv(params: dict[str, Any] | None) -> bool:
    """P: whether the request's KV is to be kept for (pull) or written to (push) a decode instance."""
    return bool(params and params.get("do_remote_decode"))


def receives_kv(params: dict[str, Any] | None) -> bool:
    """D: whether the request still waits to take its prompt's KV from P."""
    return bool(params and params.get("do_remote_prefill"))


def stop_receiving(params: dict[str, Any]) -> None:
    """D: the request takes no more KV from P (its transfer is queued, or it computes the prompt itself). vLLM keeps
    this dict on the request and asks the connector again; it also reads the flag for its own P/D statistics."""
    params["do_remote_prefill"] = False


def encode(message: msgspec.Struct) -> dict[str, Any]:
    """The plain JSON dict vLLM carries: lists, not tuples, as if it had crossed HTTP already."""
    return msgspec.json.decode(msgspec.json.encode(message))


Message = TypeVar("Message", bound=msgspec.Struct)


def decode(params: Any, kind: type[Message]) -> Message:
    """`params` read as `kind`; HandoffError names a missing or mistyped key."""
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as error:
        raise HandoffError(f"kv_transfer_params are not {kind.__name__}: {error}") from None
