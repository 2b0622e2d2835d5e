"""The live workload as clients see it, over a sliding window: arrivals, prompt and output lengths, TTFT and TPOT.

Each worker process keeps its own requests; `GET /v1/workload` gathers every worker's and summarises them together
(percentiles do not add up, samples do). Each worker's arrivals count over the time that worker has watched: a
worker restarted ten seconds ago has ten seconds of arrivals, and the rate is the sum of the workers' rates, so a
restart reads neither high nor low. The summary says `partial` while any worker has watched less than the window.
TTFT and TPOT come from streamed requests only: a non-streamed answer arrives whole, so the proxy cannot tell its
first token from its last; such requests still count for the rate and the lengths.
"""

from __future__ import annotations

import collections
import time
import msgspec
import numpy as np

WINDOW_SECONDS = 60.0
WORKLOAD_PARTS = "/v1/workload/parts"  # every worker's window as a list: what an autoscaler merges over replicas
MAX_SAMPLES = 200_000  # per worker: a 3,000 requests/s proxy keeps a full minute
QUANTILES = (50, 90, 99)


class RequestSample(msgspec.Struct, array_like=True, frozen=True):
    """One finished client request. Times are wall clock (seconds), so the workers' samples line up."""

    at: float  # arrival
    prompt_tokens: int
    output_tokens: int  # -1: not known (the answer failed)
    ttft: float  # -1: not streamed, or failed
    tpot: float  # -1: not streamed, fewer than two tokens, or failed
    ok: bool


class UsageOnly(msgspec.Struct):
    """The part of a non-streamed OpenAI answer the window reads."""

    class Usage(msgspec.Struct):
        completion_tokens: int = -1

    usage: Usage | None = None


_usage_decoder = msgspec.json.Decoder(UsageOnly)


def completion_tokens(body: bytes) -> int:
    """Output tokens of a whole (non-streamed) answer from its `usage`, -1 when it has none."""
    try:
        answer = _usage_decoder.decode(body)
    except msgspec.DecodeError:
        return -1
    return answer.usage.completion_tokens if answer.usage is not None else -1


class EventCounter:
    """Counts the SSE data events of a stream as its chunks pass and notes when the last one came; a `data: ` split
    across two chunks is still counted once. An event is one engine step, which is one token only without MTP and
    with vLLM's default stream interval; the exact count is the usage event vLLM sends last when the request asks
    for it (`stream_options.include_usage`), which the proxy asks for on every stream and takes out again when the
    client did not (`strip_usage`)."""

    MARK = b"data: "
    USAGE = b'"choices":[],'  # vLLM's final usage chunk (compact JSON): no choice, the usage

    def __init__(self, strip_usage: bool = False):
        self.events = 0
        self.last_at = 0.0
        self.usage_tokens = -1
        self._strip = strip_usage
        self._tail = b""

    def feed(self, chunk: bytes) -> bytes:
        """Count `chunk`; the chunk to pass on (without the usage event, when it is whole in it and stripped)."""
        joined = self._tail + chunk
        self.events += joined.count(self.MARK) - self._tail.count(self.MARK)
        self._tail = joined[-(len(self.MARK) - 1):]
        self.last_at = time.perf_counter()
        if self.USAGE in chunk:
            chunk = self._take_usage(chunk)
        return chunk

    def _take_usage(self, chunk: bytes) -> bytes:
        at = chunk.index(self.USAGE)
        start, end = chunk.rfind(self.MARK, 0, at), chunk.find(b"\n\n", at)
        if start < 0 or end < 0:  # split over two reads: it reaches the client, where it is a valid OpenAI event
            return chunk
        try:
            usage = msgspec.json.decode(chunk[start + len(self.MARK):end], type=UsageOnly).usage
        except msgspec.DecodeError:
            return chunk
        if usage is not None:
            self.usage_tokens = usage.completion_tokens
        return chunk[:start] + chunk[end + 2:] if self._strip else chunk

    def tokens(self) -> int:
        """Output tokens: the usage event's count, else one per event bar [DONE]."""
        return self.usage_tokens if self.usage_tokens >= 0 else max(0, self.events - 1)


class WorkloadWindow:
    """This worker's arrivals and finished requests of the last `seconds`. The rate counts arrivals as they come:
    counted at their end, requests still running (a long decode outlasts a short window) would be missing."""

    def __init__(self, seconds: float = WINDOW_SECONDS, clock=time.time):
        self.seconds = seconds
        self._clock = clock
        self.started_at = clock()
        self._arrivals: collections.deque[float] = collections.deque(maxlen=MAX_SAMPLES)
        self._samples: collections.deque[RequestSample] = collections.deque(maxlen=MAX_SAMPLES)

    def arrive(self) -> float:
        """Note an arrival now; its time, for the sample added when it ends."""
        now = self._clock()
        self._arrivals.append(now)
        return now

    def add(self, sample: RequestSample) -> None:
        self._samples.append(sample)
        self._prune(self._clock())

    def snapshot(self) -> WindowContents:
        self._prune(self._clock())
        return WindowContents(list(self._arrivals), list(self._samples), self.started_at, self.seconds)

    def _prune(self, now: float) -> None:
        horizon = now - self.seconds
        while self._arrivals and self._arrivals[0] < horizon:
            self._arrivals.popleft()
        while self._samples and self._samples[0].at < horizon:
            self._samples.popleft()


class WindowContents(msgspec.Struct, array_like=True):
    """What one worker's window holds, and since when it has watched: what GET /v1/workload/samples answers. The
    workers of a proxy, and the replicas of a deployment, are summarised as a list of these."""

    arrivals: list[float]
    finished: list[RequestSample]
    started_at: float  # wall clock: when this worker began to watch
    window: float = WINDOW_SECONDS  # seconds it keeps


def _rate(parts: list[WindowContents], window: float, now: float) -> tuple[float, float, bool]:
    """Arrivals per second summed over the parts, each over the time it watched; the longest such time; whether
    any part watched less than the window."""
    rate, longest, partial = 0.0, 0.0, False
    for part in parts:
        watched = max(1e-9, min(window, now - part.started_at))
        rate += sum(1 for t in part.arrivals if t >= now - window) / watched
        longest = max(longest, watched)
        partial = partial or watched < window
    return rate, longest, partial


def _distribution(values: np.ndarray) -> dict[str, float] | None:
    if values.size == 0:
        return None
    summary = {"mean": float(values.mean())}
    summary.update({f"p{q}": float(np.percentile(values, q)) for q in QUANTILES})
    return summary


def summarise(parts: list[WindowContents], window: float, now: float, backends: list[dict]) -> dict:
    """The windows of every worker (or replica) as one JSON-ready document: what `ascend-pd replan --observed` reads.
    Lengths and latencies are of the requests that ended in it; the rate and `requests` count the arrivals."""
    arrivals = [t for part in parts for t in part.arrivals if t >= now - window]
    samples = [s for part in parts for s in part.finished if s.at >= now - window]
    rate, observed, partial = _rate(parts, window, now)
    ok = [s for s in samples if s.ok]
    outputs = np.array([s.output_tokens for s in ok if s.output_tokens >= 0], dtype=float)
    ttft = np.array([s.ttft for s in ok if s.ttft >= 0], dtype=float)
    tpot = np.array([s.tpot for s in ok if s.tpot >= 0], dtype=float)
    return {
        "window_seconds": window,
        "observed_seconds": observed,
        "partial": partial,
        "requests": len(arrivals),
        "finished": len(samples),
        "failed": len(samples) - len(ok),
        "rate_rps": rate,
        "prompt_tokens": _distribution(np.array([s.prompt_tokens for s in samples], dtype=float)),
        "output_tokens": _distribution(outputs),
        "ttft_seconds": _distribution(ttft),
        "tpot_seconds": _distribution(tpot),
        "streamed": int(ttft.size),
        "backends": backends,
    }


def encode_contents(contents: WindowContents) -> bytes:
    return msgspec.json.encode(contents)


def decode_contents(body: bytes) -> WindowContents:
    return msgspec.json.decode(body, type=WindowContents)


def encode_parts(parts: list[WindowContents]) -> bytes:
    return msgspec.json.encode(parts)


def decode_parts(body: bytes) -> list[WindowContents]:
    return msgspec.json.decode(body, type=list[WindowContents])
