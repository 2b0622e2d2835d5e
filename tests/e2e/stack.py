"""Run a deployment on this host the way an operator would: validate, render, launch scripts, proxy; then stop it."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

from ascend_pd.deploy import parse_deployment
from ascend_pd.deploy.secrets import ADMIN_TOKEN
from ascend_pd.proxy.endpoints import endpoints_from_deployment

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "logs" / "e2e"
START_TIMEOUT_S = float(os.environ.get("E2E_START_TIMEOUT_S", "900"))
STOP_TIMEOUT_S = 20  # a stop script's SIGTERM, then SIGKILL for what is left after this many seconds
# Stop scripts of stacks the suite is done with, still running: engines take seconds to shut down, which the next
# stack (on ports of its own) need not wait for. The session waits for them at its end (conftest.py).
STOPPING: list[subprocess.Popen] = []


def ascend_pd(*args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", *args], capture_output=True, text=True,
                            env=env)
    if check and result.returncode != 0:
        raise AssertionError(f"ascend-pd {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


# A client of the proxy does what an OpenAI client does with a 503 that carries Retry-After (the proxy's answer
# while health checks find no backend of a role): waits and sends again, for this long at most. Each time is
# counted and printed in the summary, so a proxy that flaps shows.
RETRY_503_FOR_S = 60.0
RETRIED_503: list[str] = []


def _retry_after(status: int, headers) -> float | None:
    if status != 503 or headers.get("Retry-After") is None:
        return None
    return float(headers["Retry-After"])


def http_json(url: str, body: dict | None = None, timeout: float = 300.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + RETRY_503_FOR_S
    while True:
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as refused:
            wait = _retry_after(refused.code, refused.headers)
            if wait is None or time.monotonic() + wait > deadline:
                raise
            RETRIED_503.append(f"{url}: {refused.read()[:200]!r}")
            time.sleep(wait)


def open_stream(url: str, body: dict, timeout: float = 300.0) -> tuple[http.client.HTTPConnection,
                                                                      http.client.HTTPResponse]:
    """POST a streaming request and return the connection and its 200 response (503s retried as above)."""
    host, port, path = _split(url)
    deadline = time.monotonic() + RETRY_503_FOR_S
    while True:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("POST", path, json.dumps(dict(body, stream=True)), {"Content-Type": "application/json"})
        response = conn.getresponse()
        wait = _retry_after(response.status, response.headers)
        if wait is None or time.monotonic() + wait > deadline:
            assert response.status == 200, response.read()[:500]
            return conn, response
        RETRIED_503.append(f"{url}: {response.read()[:200]!r}")
        conn.close()
        time.sleep(wait)


def http_text(url: str, timeout: float = 10.0, token: str | None = None) -> str:
    """The body of a GET; `token` is the proxy's admin token, which its /metrics and /health detail ask for."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        return response.read().decode()


def sse_events(response: Iterable[bytes]) -> Iterator[dict | None]:
    """The JSON events of a server-sent-events body, then None for its `data: [DONE]` (absent if it never came)."""
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            yield None
            return
        yield json.loads(payload)


def stream_completion(url: str, body: dict, timeout: float = 300.0) -> tuple[str, list[dict]]:
    """POST a streaming request; return the concatenated text and the parsed SSE events."""
    conn, response = open_stream(url, body, timeout)
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    events, text = [], []
    for event in sse_events(response):
        if event is None:
            break
        assert "error" not in event, event
        events.append(event)
        for choice in event.get("choices", []):
            text.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    conn.close()
    return "".join(text), events


def _split(url: str) -> tuple[str, int, str]:
    match = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    assert match, url
    return match.group(1), int(match.group(2)), match.group(3)


def metric(text: str, name: str) -> float:
    """Sum of every sample of a Prometheus metric (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def prompt_counts(decode_url: str) -> tuple[float, float, float]:
    """D's prompt tokens so far: in all, found outside (loaded from P) and found in its own prefix cache."""
    text = http_text(f"{decode_url}/metrics")
    return tuple(metric(text, f"vllm:{name}") for name in ("prompt_tokens_total", "external_prefix_cache_hits_total",
                                                          "prefix_cache_hits_total"))


def assert_prompt_kv_came_from_prefill(decode_url: str, since: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> None:
    """Every prompt's KV came from P, except the tokens D found in its own prefix cache and the last token that
    vLLM always recomputes to get logits (so at least 80% of the rest); counted from `since` (prompt_counts), so
    that prompts D was sent alone do not count."""
    prompt_tokens, external, local = (now - then for now, then in zip(prompt_counts(decode_url), since))
    assert prompt_tokens > 0
    assert external >= 0.8 * (prompt_tokens - local), (external, local, prompt_tokens)


def render_as_an_operator(deployment: dict, workdir: Path, logs: Path, render_dir: Path, *flags: str) -> dict:
    """Write the deployment, validate it and render its bash bundle into `render_dir` with `flags`; the environment
    its launch scripts run in (logs under `logs`, this venv's commands first on PATH)."""
    workdir.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    path = workdir / "deployment.yaml"
    path.write_text(yaml.safe_dump(deployment, sort_keys=False))
    ascend_pd("validate", str(path))
    if render_dir.exists():
        shutil.rmtree(render_dir)
    ascend_pd("render", str(path), "--out", str(render_dir), "--target", "bash", *flags)
    return operator_env(logs)


def operator_env(logs: Path) -> dict:
    """The environment launch scripts run in: logs under `logs`, this venv's commands first on PATH."""
    return dict(os.environ, LOG_DIR=str(logs), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


class Stack:
    """One deployment of the local-cpu cluster, running from its rendered launch scripts."""

    def __init__(self, deployment: dict, workdir: Path, logs: Path):
        self.deployment = deployment
        self.workdir = workdir
        self.logs = logs
        self.render_dir = workdir / "render"

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.deployment['proxy']['port']}"

    @property
    def admin_token(self) -> str:
        """The admin token render wrote into the bundle, which the rendered proxy was started with."""
        return (self.render_dir / ADMIN_TOKEN).read_text().strip()

    def endpoint_urls(self, role: str) -> list[str]:
        """Where the deployment's rank layout puts the role's engines, as the proxy reaches them."""
        loaded = parse_deployment(yaml.safe_dump(self.deployment), str(self.workdir / "deployment.yaml"))
        return [e.url for e in endpoints_from_deployment(loaded) if e.role == role]

    def start(self) -> "Stack":
        render_as_an_operator(self.deployment, self.workdir, self.logs, self.render_dir)
        return self.launch()

    def launch(self) -> "Stack":
        """Run the bundle in render_dir as it stands; wait until every engine the deployment names and the proxy
        answer."""
        env = operator_env(self.logs)
        for script in sorted(self.render_dir.glob("launch-*.sh")):
            subprocess.run(["bash", str(script)], check=True, env=env, capture_output=True, text=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        for url in self.endpoint_urls("prefill") + self.endpoint_urls("decode") + self.endpoint_urls("colocated"):
            self._wait_ready(f"{url}/v1/models", deadline)
        self._wait_ready(f"{self.proxy_url}/health", deadline)
        return self

    def _wait_ready(self, url: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                self.fail_if_a_process_died()
                time.sleep(0.5)  # a start-up poll: each second slept here is lost from the suite
        raise AssertionError(f"{url} not ready after {START_TIMEOUT_S:.0f} s; logs in {self.logs}")

    def process_groups(self) -> list[int]:
        """The process group of each launched process (engines and the proxy), as their pid files name them."""
        return [int(pidfile.read_text()) for pidfile in sorted((self.render_dir / "run").glob("*.pid"))]

    def fail_if_a_process_died(self) -> None:
        for pidfile in (self.render_dir / "run").glob("*.pid"):
            pid = int(pidfile.read_text())
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log = self.logs / f"{pidfile.stem}.log"
                tail = log.read_text()[-3000:] if log.exists() else "(no log)"
                raise AssertionError(f"{pidfile.stem} exited; log {log}:\n{tail}") from None

    def stop(self, wait: bool = True) -> None:
        """Run the rendered stop scripts; with `wait` false, leave them to end while the suite goes on (STOPPING)."""
        env = dict(os.environ, LOG_DIR=str(self.logs), STOP_TIMEOUT=str(STOP_TIMEOUT_S))
        scripts = [subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True) for script in sorted(self.render_dir.glob("stop-*.sh"))]
        if not wait:
            STOPPING.extend(scripts)
            return
        for script in scripts:
            script.communicate()

    def __enter__(self) -> "Stack":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop(wait=False)


def wait_for_stops() -> list[str]:
    """Wait for every stop left running (each script ends within STOP_TIMEOUT_S, killing what outlasts it); what
    went wrong, one line each."""
    problems = []
    while STOPPING:
        script = STOPPING.pop()
        try:
            _, stderr = script.communicate(timeout=STOP_TIMEOUT_S + 15)
        except subprocess.TimeoutExpired:
            script.kill()
            problems.append(f"{' '.join(script.args)} still ran {STOP_TIMEOUT_S + 15} s after the suite ended")
            continue
        if script.returncode != 0:
            problems.append(f"{' '.join(script.args)} exited {script.returncode}: {stderr.strip()[-500:]}")
    return problems
