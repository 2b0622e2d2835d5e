"""Control messages of the side channel, as msgspec Structs: handshakes, push announcements, completion notices."""

from __future__ import annotations

import msgspec


class PlaneInfo(msgspec.Struct, frozen=True):
    """Where one registered cache tensor (one layer's K, V, latent or rope cache) lives in a worker's memory."""

    base_addr: int
    num_blocks: int
    block_stride: int  # bytes from one block to the next
    block_len: int  # bytes of one block's data
    num_heads: int  # KV heads this rank holds in the tensor (1 for an MLA latent)
    heads_outer: bool  # True when a block is [heads, tokens, dim] (a head slice is contiguous), False for NHD


class AgentMetadata(msgspec.Struct, frozen=True, tag=True):
    """What a peer needs to move one worker's KV: its Transfer Engine session and every cache plane."""

    engine_id: str
    tp_rank: int
    tp_size: int
    session: str  # "host:rpc_port" of the worker's Transfer Engine
    block_size: int  # tokens per block
    planes: list[PlaneInfo]


class GetMeta(msgspec.Struct, tag=True):
    """Ask a worker for its AgentMetadata."""


class ReadDone(msgspec.Struct, tag=True):
    """Pull: a decode rank finished (or gave up) reading a request's blocks; the prefill rank may free them."""

    request_id: str
    dst_rank: int


class PushReady(msgspec.Struct, tag=True):
    """Push: a decode rank allocated blocks for a transfer and says where to write them."""

    transfer_id: str
    block_ids: list[int]  # empty: nothing to write (the request ended on D); do not wait for us
    first_block: int  # prompt block index of block_ids[0]; earlier blocks were prefix-cache hits on D
    dst: AgentMetadata
    dst_host: str
    dst_port: int  # the decode rank's side-channel port, for the PushDone notice
    # Seconds from sending until the decode rank gives up on this transfer and hands its blocks to a recompute
    # (None: no bound). P starts no write that could land after it.
    expires_in_s: float | None = None


class PushDone(msgspec.Struct, tag=True):
    """Push: a prefill rank wrote every layer of a transfer (ok) or failed to."""

    transfer_id: str
    src_rank: int
    ok: bool
    # For D's exposed-transfer measurement, wall clock: the sender's last layer computed, its first write issued.
    prefilled_at: float | None = None
    first_write_at: float | None = None
    nbytes: int = 0  # bytes it wrote to this decode rank


class Ack(msgspec.Struct, tag=True):
    """The request was taken."""


class Refused(msgspec.Struct, tag=True):
    """The request cannot be served; reason says why and how to fix it."""

    reason: str


Request = GetMeta | ReadDone | PushReady | PushDone
Reply = AgentMetadata | Ack | Refused

# The largest message a side-channel socket takes (ZMQ_MAXMSGSIZE; a larger one drops its sender's connection
# before a byte is buffered). The largest real message is a PushReady: its block ids (at most 5 bytes each in
# msgpack) and its AgentMetadata (about 100 bytes a cache plane). 2**21 block ids (a 32M-token prompt at block size
# 16) and 4096 planes (2 per layer of a 2048-layer model) encode to about 10.4 MiB; 16 MiB leaves room above that.
MAX_MESSAGE_BYTES = 16 << 20

_encoder = msgspec.msgpack.Encoder()
_request_decoder = msgspec.msgpack.Decoder(Request)
_reply_decoder = msgspec.msgpack.Decoder(Reply)


def encode(message: Request | Reply) -> bytes:
    return _encoder.encode(message)


def decode_request(payload: bytes) -> Request:
    return _request_decoder.decode(payload)


def decode_reply(payload: bytes) -> Reply:
    return _reply_decoder.decode(payload)
