"""`ascend-pd autoscale` against a rendered Kubernetes bundle, with the admin token only in the deployment's Secret:
the proxy runs as its rendered pod would (its command and env, the ConfigMaps and the Secret materialised where the
pod mounts them, as the kubelet does), kubectl is a recording stand-in, and the autoscaler is given no token: it
reads the one render wrote into the bundle, pushes the backend table to the proxy and observes it."""

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from ascend_pd.deploy.secrets import ADMIN_TOKEN, ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV, K8S_SECRET_MODE
from tests.fakes.vllm_api import FakeEngine, wait_healthy
from tests.ports import free_port
from tests.unit.autoscale.bundles import recording_kubectl

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml"


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)


def without_tokens() -> dict:
    """This environment with no admin token in it: the token must come from the bundle."""
    return {k: v for k, v in os.environ.items() if k not in (ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV)}


def objects(path: Path) -> list[dict]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o]


def volume_files(volume: dict, manifests: Path) -> dict[str, tuple[bytes, int]]:
    """The files a ConfigMap or Secret volume shows in the pod, by name, with their mode."""
    if "configMap" in volume:
        name = volume["configMap"]["name"]
        data = next(o for p in manifests.glob("*.yaml") if p.name != "secrets.yaml" for o in objects(p)
                    if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name).get("data") or {}
        return {key: (text.encode(), volume["configMap"].get("defaultMode", 0o644)) for key, text in data.items()}
    secret = volume["secret"]
    (found,) = [o for o in objects(manifests / "secrets.yaml") if o["metadata"]["name"] == secret["secretName"]]
    return {item["path"]: (base64.b64decode(found["data"][item["key"]]), secret["defaultMode"])
            for item in secret["items"]}


def proxy_pod_argv(bundle: Path, root: Path, host_ip: str) -> tuple[list[str], dict]:
    """The rendered proxy pod's command and env, run here: each volume it mounts materialised under `root`, every
    path in the command and env moved there."""
    (deployment,) = [o for o in objects(bundle / "k8s" / "proxy.yaml") if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    moved = {}
    for mount in container["volumeMounts"]:
        where = root / mount["mountPath"].lstrip("/")
        where.mkdir(parents=True)
        for name, (data, mode) in volume_files(volumes[mount["name"]], bundle / "k8s").items():
            (where / name).write_bytes(data)
            (where / name).chmod(mode)
        moved[mount["mountPath"]] = str(where)

    def here(text: str) -> str:
        for mount_path in sorted(moved, key=len, reverse=True):
            text = text.replace(mount_path + "/", moved[mount_path] + "/")
        return text.replace("$(HOST_IP)", host_ip)

    env = {**without_tokens(), **{e["name"]: here(e["value"]) for e in container["env"] if "value" in e}}
    command = container["command"]
    assert command[0] == "ascend-pd" and "--admin-token" not in command
    return [sys.executable, "-m", "ascend_pd.cli.main", *map(here, command[1:])], env


@pytest.fixture
def bundle(tmp_path) -> Path:
    """The local-cpu example on free ports, rendered for Kubernetes on the command line."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for instance in data["instances"]:
        instance["http_port"] = free_port()
    data["proxy"]["port"] = free_port()
    source = tmp_path / "deployment.yaml"
    source.write_text(yaml.safe_dump(data))
    done = cli("render", str(source), "--target", "k8s", "--out", str(tmp_path / "bundle"))
    assert done.returncode == 0, done.stderr
    return tmp_path / "bundle"


@pytest.mark.asyncio
async def test_autoscale_drives_a_k8s_proxy_with_the_token_from_the_deployments_secret(bundle, tmp_path):
    data = yaml.safe_load((bundle / "deployment.yaml").read_text())
    engines = [await FakeEngine(i["role"], port=i["http_port"], kv_port=0).start() for i in data["instances"]]
    argv, env = proxy_pod_argv(bundle, tmp_path / "pod", "127.0.0.1")
    mounted_token = Path(env[ADMIN_TOKEN_FILE_ENV])
    assert mounted_token.stat().st_mode & 0o777 == K8S_SECRET_MODE
    proxy = subprocess.Popen([*argv, "--workers", "1", "--health-interval", "0", "--engine-load-interval", "0"],
                             env=env, stderr=open(tmp_path / "proxy.log", "w"))
    url = f"http://127.0.0.1:{data['proxy']['port']}"
    token = (bundle / ADMIN_TOKEN).read_text().strip()
    kubectl, calls = recording_kubectl(tmp_path)
    try:
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, url, 30)
            for i in range(3):  # a window with traffic in it, for the autoscaler to observe
                body = {"model": data["model"]["served_name"], "prompt": f"hello {i}", "max_tokens": 2}
                async with session.post(url + "/v1/completions", json=body) as answer:
                    assert answer.status == 200, await answer.text()
            # an operator takes decode out by hand (with the Secret's token): the autoscaler must publish it back
            async with session.post(url + "/admin/backends/remove", json={"url": engines[1].url},
                                    headers={"Authorization": f"Bearer {token}"}) as answer:
                assert answer.status == 200, await answer.text()
        # in a thread: the fake engines answer the autoscaler's health checks from this event loop
        done = await asyncio.to_thread(cli, "autoscale", "--deployment", str(bundle / "deployment.yaml"), "--target",
                                       "k8s", "--kubectl", kubectl, "--intervals", "1", "--interval", "0.1",
                                       "--dry-run", env=without_tokens())
        assert done.returncode == 0, done.stderr
        lines = [json.loads(line) for line in (bundle / "autoscale.jsonl").read_text().splitlines()]
        decision = next(line for line in lines if line["phase"] == "decision")
        assert decision["decision"] != "unobservable", decision  # no 401: the token reached the proxy
        assert any(line["phase"] == "reconcile" and line["status"] == "ok" for line in lines), lines
        applied = [json.loads(line) for line in calls.read_text().splitlines()]
        assert applied == [["apply", "-f", str(bundle / "k8s" / "backends.yaml")]]  # the table, for the pods
        # the proxy serves the table the autoscaler pushed, to the Secret's token and to no other
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/admin/table", headers={"Authorization": f"Bearer {token}"}) as answer:
                table = await answer.json()
                assert answer.status == 200 and table["generation"] == 2  # the hand-made change, then the pushed one
                assert engines[1].url in [backend["url"] for backend in table["backends"]]
            async with session.get(url + "/admin/table", headers={"Authorization": "Bearer guess"}) as answer:
                assert answer.status in (401, 403)
        assert token not in done.stderr and token not in (bundle / "autoscale.jsonl").read_text()
    finally:
        proxy.terminate()
        proxy.wait(15)
        for engine in engines:
            await engine.stop()
