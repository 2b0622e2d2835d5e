"""The proxy's admin API as a rollout uses it: add, drain and remove backends, read their requests in flight. Every
call is bounded by a timeout and fails with a StepFailed that says what did not happen."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import msgspec

from ascend_pd.deploy.handoff import KVAddress, encode
from ascend_pd.deploy.http_calls import Unreachable, call

CALL_TIMEOUT = 10.0
POLL_SECONDS = 0.5


class StepFailed(Exception):
    """A rollout step that did not complete; the message says which and why."""


class TableConflict(StepFailed):
    """A proxy answered 409 to a backend table: it serves a change made after the table this one was made from.
    `replica`: the proxy replica that answered, when a control plane sent the table to several."""

    def __init__(self, message: str, replica: str | None = None):
        super().__init__(message)
        self.replica = replica


class Interrupted(StepFailed):
    """The autoscaler was told to stop (SIGINT, SIGTERM): a rollout in progress ends as at a failed step, then the
    loop stops."""


def http_json(method: str, url: str, body: dict | None = None, token: str | None = None,
              timeout: float = CALL_TIMEOUT) -> Any:
    """The JSON answer of `method` `url`; TableConflict on a 409, StepFailed on any other failure."""
    try:
        answer = call(url, timeout, method=method, body=body, token=token)
    except Unreachable as exc:
        raise StepFailed(f"{method} {url}: {exc}") from None
    if answer.status >= 400:
        failure = TableConflict if answer.status == 409 else StepFailed
        raise failure(f"{method} {url} answered {answer.status}: {answer.body[:300].decode(errors='replace')}")
    if not answer.body:
        return None
    try:
        return json.loads(answer.body)
    except ValueError:
        raise StepFailed(f"{method} {url} answered {answer.status} without JSON") from None


def readable(answer: Any, kind: Any, what: str) -> Any:
    """`answer` (decoded JSON) as `kind`; StepFailed naming `what` was asked when it is of another shape, as from a
    proxy of another release or a service that is not a proxy."""
    try:
        return msgspec.convert(answer, kind)
    except msgspec.ValidationError as exc:
        raise StepFailed(f"{what} answered what the autoscaler cannot read ({exc}): is it an ascend-pd proxy of "
                         f"this release?") from None


class Listed(msgspec.Struct):
    """What the autoscaler reads of one backend in GET /admin/backends (the proxy lists more)."""

    url: str
    inflight: int
    proxy_inflight: int | None = None  # this proxy's own requests on it; `inflight` is the engine's whole load


def listed_backends(url: str, token: str | None, timeout: float) -> list[dict]:
    """GET /admin/backends of the proxy at `url`, each backend's listing checked for what the autoscaler reads."""
    listed = http_json("GET", url + "/admin/backends", None, token, timeout)
    readable(listed, list[Listed], f"GET {url}/admin/backends")
    return listed


def healthy(url: str, timeout: float) -> bool:
    """Whether the engine at `url` answers GET /health with 200 within `timeout`."""
    try:
        return call(url + "/health", timeout).status == 200
    except Unreachable:
        return False


class ProxyAdmin:
    def __init__(self, url: str, token: str | None, timeout: float = CALL_TIMEOUT):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        return http_json(method, self.url + path, body, self.token, self.timeout)

    def add(self, url: str, role: str, instance: str | None = None, dp_rank: int = 0,
            kv: KVAddress | None = None) -> None:
        """Add (or put back, when drained) the backend at `url`; `kv` is where its KV connector listens (push)."""
        body = {"url": url, "role": role, "dp_rank": dp_rank}
        if instance:
            body["instance"] = instance
        if kv:
            body["kv"] = encode(kv)
        self._call("POST", "/admin/backends", body)

    def drain(self, url: str) -> None:
        self._call("POST", "/admin/backends/drain", {"url": url})

    def remove(self, url: str) -> None:
        self._call("POST", "/admin/backends/remove", {"url": url})

    def backends(self) -> dict[str, dict]:
        return {b["url"]: b for b in listed_backends(self.url, self.token, self.timeout)}

    def wait_idle(self, urls: list[str], seconds: float) -> None:
        """Until the proxy has no request in flight on any of `urls` (every worker's count); StepFailed after
        `seconds`."""
        wait_until_idle(self.backends, urls, seconds)


def wait_until_idle(backends: Callable[[], dict[str, dict]], urls: list[str], seconds: float) -> None:
    """Until `backends()` (url -> listing) shows no request in flight on any of `urls`; StepFailed after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        listed = backends()
        busy = {url: listed[url].get("proxy_inflight", listed[url]["inflight"]) for url in urls if url in listed}
        busy = {url: n for url, n in busy.items() if n}
        if not busy:
            return
        if time.monotonic() > deadline:
            raise StepFailed(f"requests still in flight after {seconds:g} s: {busy}")
        time.sleep(POLL_SECONDS)


def not_answering(urls: list[str], timeout: float = CALL_TIMEOUT) -> list[str]:
    """Those of `urls` whose GET /health does not answer 200 within `timeout`, asked all at once."""
    if not urls:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(urls))) as pool:
        return [url for url, ok in zip(urls, pool.map(lambda url: healthy(url, timeout), urls)) if not ok]


def wait_healthy(urls: list[str], seconds: float) -> None:
    """Until every engine at `urls` answers GET /health with 200; StepFailed naming the ones that did not."""
    deadline = time.monotonic() + seconds
    waiting = list(urls)
    while waiting:
        for url in list(waiting):
            if healthy(url, min(CALL_TIMEOUT, seconds)):
                waiting.remove(url)
        if waiting and time.monotonic() > deadline:
            raise StepFailed(f"not healthy within {seconds:g} s: {', '.join(waiting)}")
        if waiting:
            time.sleep(POLL_SECONDS)
