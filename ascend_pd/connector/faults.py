"""What a failed transfer was: the peer's or the network's doing (a load error, logged in one line naming the
peer), or a bug in this connector (still a load error, so the engine goes on and vLLM recomputes the prompt, but
logged with its traceback so that it is not mistaken for a flaky link)."""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout

import msgspec
import zmq

from ascend_pd.connector.peers import PeerRefused
from ascend_pd.connector.routes import LayoutMismatch
from ascend_pd.connector.side_channel import PeerUnreachable
from ascend_pd.connector.staging import StagingTooSmall
from ascend_pd.connector.transport import TransferFailed

# Peers that are dead, slow, restarted, black-holed or built differently; messages that do not decode; the
# network; a staging buffer set too small for the caches.
TRANSFER_FAULTS = (TransferFailed, PeerUnreachable, PeerRefused, LayoutMismatch, StagingTooSmall,
                   msgspec.MsgspecError, zmq.ZMQError, OSError, TimeoutError, FutureTimeout)


def explain(logger: logging.Logger, error: BaseException, what: str) -> str:
    """The reason to report for `error`, which ended `what`; anything but a transfer fault is logged here with
    its traceback, as the bug it is."""
    if isinstance(error, TRANSFER_FAULTS):
        return str(error)
    logger.error("AscendPD: %s: unexpected %s, a bug in the connector rather than a transfer fault; the request "
                 "is handled as a failed transfer", what, type(error).__name__, exc_info=error)
    return f"{type(error).__name__}: {error}"
