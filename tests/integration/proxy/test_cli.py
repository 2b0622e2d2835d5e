"""`ascend-pd proxy` as a real process: serves from a deployment.yaml, on asyncio or uvloop, and refuses bad input
with exit 2."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tracemalloc

import aiohttp
import pytest

from ascend_pd.proxy.memory_trace import ENV_VAR as TRACEMALLOC_ENV
from tests.fakes.vllm_api import FakeEngine, wait_healthy
from tests.ports import free_port

PROXY = [sys.executable, "-m", "ascend_pd.cli.main", "proxy"]


def deployment(prefill: FakeEngine, decode: FakeEngine, connector: str, proxy_port: int, policy="least-loaded"):
    return f"""
apiVersion: ascend-pd/v1
kind: Deployment
metadata: {{name: cli-test}}
cluster: local-cpu
model: {{name: tiny-llama-gqa, path: /models/tiny}}
connector: {connector}
instances:
  - {{name: prefill-0, role: prefill, devices: [{{node: localhost-00, devices: [0]}}], http_port: {prefill.port},
      kv_port: {prefill.kv_port}}}
  - {{name: decode-0, role: decode, devices: [{{node: localhost-00, devices: [1]}}], http_port: {decode.port},
      kv_port: {decode.kv_port}}}
proxy: {{node: localhost-00, port: {proxy_port}, policy: {policy}}}
"""


def run(*args):
    return subprocess.run([*PROXY, *args], capture_output=True, text=True, timeout=60)


def assert_clean_failure(result, *needles):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "fix:" in result.stderr
    for needle in needles:
        assert needle in result.stderr


def test_no_backends_is_exit_2_with_a_fix():
    assert_clean_failure(run(), "no backends")


def test_unknown_policy_is_exit_2_naming_the_choices():
    assert_clean_failure(run("--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9", "--policy", "best"),
                         "unknown routing policy", "round-robin")


def test_a_port_already_in_use_is_exit_2_naming_the_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_clean_failure(run("--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9", "--host",
                                 "127.0.0.1", "--port", str(port)), f"port {port} is already in use", "--port")


def test_layerwise_on_a_wildcard_address_asks_for_an_advertised_url():
    assert_clean_failure(run("--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9", "--mode",
                             "layerwise"), "--advertise-url")


def test_missing_deployment_file_is_exit_2(tmp_path):
    assert_clean_failure(run("--deployment", str(tmp_path / "nope.yaml")), "nope.yaml")



@pytest.mark.asyncio
@pytest.mark.parametrize("connector", ["{implementation: ascend-pd, mode: pull, protocol: tcp}",
                                       "{implementation: ascend-pd, mode: push, protocol: tcp}",
                                       "{implementation: vllm-ascend, mode: push, protocol: tcp}"])
async def test_proxy_process_serves_the_deployment(tmp_path, connector):
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decode = await FakeEngine("decode", kv_port=0).start()
    port = free_port()
    path = tmp_path / "deployment.yaml"
    path.write_text(deployment(prefill, decode, connector, port))
    process = await asyncio.create_subprocess_exec(*PROXY, "--deployment", str(path), "--host", "127.0.0.1",
                                                   stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    body = {"model": "fake-model", "prompt": "from a file", "max_tokens": 6, "stream": True}
    try:
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, url)
            async with session.post(url + "/v1/completions", json=body) as answer:
                proxied = await answer.read()
            async with session.post(decode.url + "/v1/completions", json=body) as answer:
                direct = await answer.read()
        assert proxied == direct
        assert prefill.received and prefill.received[0]["max_tokens"] == 1
    finally:
        process.terminate()
        await process.wait()
        await prefill.stop()
        await decode.stop()


def test_asking_for_uvloop_without_it_is_exit_2(tmp_path):
    blocker = tmp_path / "uvloop.py"
    blocker.write_text("raise ImportError('not installed here')\n")  # shadows the real uvloop
    result = subprocess.run([*PROXY, "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9",
                             "--event-loop", "uvloop"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert_clean_failure(result, "uvloop is not installed")


@pytest.mark.asyncio
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
async def test_proxy_process_serves_on_the_chosen_event_loop_and_dumps_memory_snapshots(tmp_path, event_loop):
    if event_loop == "uvloop":
        pytest.importorskip("uvloop")
    prefill = await FakeEngine("prefill", kv_port=0).start()
    decode = await FakeEngine("decode", kv_port=0).start()
    port = free_port()
    traces = tmp_path / "traces"
    process = await asyncio.create_subprocess_exec(
        *PROXY, "--prefill", prefill.url, "--decode", decode.url, "--host", "127.0.0.1", "--port", str(port),
        "--event-loop", event_loop, stderr=subprocess.PIPE, env={**os.environ, TRACEMALLOC_ENV: str(traces)})
    url = f"http://127.0.0.1:{port}"
    try:
        started = (await process.stderr.readline()).decode()
        assert f"{event_loop} event loop" in started
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, url)
            body = {"model": "fake-model", "prompt": "on a loop", "max_tokens": 4}
            async with session.post(url + "/v1/completions", json=body) as answer:
                assert answer.status == 200
            process.send_signal(signal.SIGUSR1)
            for _ in range(100):
                if list(traces.glob("proxy-*.tracemalloc")):
                    break
                await asyncio.sleep(0.1)
        snapshot = tracemalloc.Snapshot.load(str(next(traces.glob("proxy-*.tracemalloc"))))
        assert snapshot.traces  # the proxy traced its allocations from the start
    finally:
        process.terminate()
        await process.wait()
        await prefill.stop()
        await decode.stop()
