"""vllm-ascend's start-up checks, transcribed in render/vllm_ascend_checks.py, pass on every engine render writes
for a deployment that validates: the shipped examples under both implementations and modes, and 100 plans (a
share of them in a local run, tests/fuzz.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from ascend_pd.deploy import has_errors, parse_deployment, validate
from ascend_pd.render import plan_processes, render_bundle
from ascend_pd.render.vllm_ascend_checks import EngineStart, plan_refusals, refusals
from tests.fuzzed_plans import fuzzed_plan, plan_seeds

from .conftest import EXAMPLE_NAMES, example_data

BLOCKS = 10
CONNECTORS = [("ascend-pd", "pull"), ("ascend-pd", "push"), ("vllm-ascend", "pull"), ("vllm-ascend", "push")]


def engine(kv_extra: dict, *, role: str = "kv_consumer", connector: str = "AscendPDConnector", tp: int = 4,
           dp: int | None = None, mla: bool = False, kv_heads: int = 8, c8: bool = False) -> EngineStart:
    argv = ["vllm", "serve", "/models/m", "--tensor-parallel-size", str(tp)]
    if dp is not None:
        argv += ["--data-parallel-size", str(dp)]
    argv += ["--kv-transfer-config", json.dumps({"kv_connector": connector, "kv_role": role,
                                                 "kv_connector_extra_config": kv_extra})]
    return EngineStart.from_argv("decode-0-dp0", argv, mla=mla, kv_heads=kv_heads, attention_heads=64, c8=c8)


def failed_checks(start: EngineStart) -> set[str]:
    return {r.check.split()[-1] for r in refusals(start)}


# ---- each transcribed check refuses what vllm-ascend refuses, and passes its nearest accepted neighbour


def test_a_dense_dp_rank_started_as_its_own_engine_must_not_claim_the_instances_dp():
    """The Atlas A2 Qwen3-32B example as render wrote it before: decode dp_size 2, each DP rank an engine of DP 1."""
    old = {"prefill": {"tp_size": 4, "dp_size": 1}, "decode": {"tp_size": 4, "dp_size": 2}}
    assert failed_checks(engine(old)) == {"check_kv_extra_config"}
    assert failed_checks(engine(old, dp=2)) == set()
    assert failed_checks(engine({**old, "decode": {"tp_size": 4, "dp_size": 1}})) == set()


def test_only_the_engines_own_role_is_held_to_its_sizes():
    shapes = {"prefill": {"tp_size": 8, "dp_size": 4}, "decode": {"tp_size": 4, "dp_size": 1}}
    assert failed_checks(engine(shapes, role="kv_consumer")) == set()
    assert failed_checks(engine(shapes, role="kv_producer")) == {"check_kv_extra_config"}


def test_gqa_prefill_tp_below_decode_tp_is_refused_for_any_connector_that_names_it():
    shapes = {"prefill": {"tp_size": 2, "dp_size": 1}, "decode": {"tp_size": 4, "dp_size": 1}}
    assert "AscendConfig.__init__" in failed_checks(engine(shapes))
    assert "AscendConfig.__init__" not in failed_checks(engine(shapes, mla=True))
    # ascend-pd's own key is not read by vllm-ascend: the same shapes there pass
    assert failed_checks(engine({"ascend_pd_shapes": shapes})) == set()


def test_c8_on_a_gqa_model_is_refused_with_the_pull_connector_only():
    shapes = {"prefill": {"tp_size": 4, "dp_size": 1}, "decode": {"tp_size": 4, "dp_size": 1}}
    pull = engine(shapes, connector="MooncakeConnectorV1", c8=True)
    assert "AscendConfig._check_mooncake_c8_kv_cache_quant" in failed_checks(pull)
    assert failed_checks(engine(shapes, connector="MooncakeLayerwiseConnector", c8=True)) == set()
    assert failed_checks(engine(shapes, connector="MooncakeConnectorV1", c8=True, mla=True)) == set()


def test_the_pull_connector_needs_both_shapes_and_no_decode_pp():
    assert failed_checks(engine({"prefill": {"tp_size": 4}}, connector="MooncakeConnectorV1")) == \
        {"MooncakeConnectorWorker.__init__"}
    staged = {"prefill": {"tp_size": 4, "dp_size": 1}, "decode": {"tp_size": 4, "dp_size": 1, "pp_size": 2}}
    assert failed_checks(engine(staged, connector="MooncakeConnectorV1")) == {"MooncakeConnectorWorker.__init__"}


# ---- over what render writes


def _loaded(data: dict):
    return parse_deployment(yaml.safe_dump(data), "test.yaml")


def _checked(data: dict) -> tuple[bool, list, int]:
    """(whether validation accepts the deployment, the refusals of its rendered engines, how many of them have a KV
    connector)."""
    loaded = _loaded(data)
    if has_errors(validate(loaded)):
        return False, [], 0
    plan = plan_processes(loaded)
    return True, plan_refusals(plan), sum(1 for p in plan.processes() if p.kv_config)


@pytest.mark.parametrize("implementation,mode", CONNECTORS)
@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_every_engine_of_every_shipped_example_starts_under_vllm_ascend(name, implementation, mode):
    data = example_data(name)
    data["connector"].update(implementation=implementation, mode=mode)
    accepted, found, _ = _checked(data)
    assert found == [], "\n".join(r.describe() for r in found)
    assert accepted or implementation == "vllm-ascend" and name.startswith("local-cpu")


@pytest.fixture
def without_rule_apd403():
    from ascend_pd.deploy.rules import base, connector

    index = base.RULES.index(connector.vllm_ascend_tp)
    base.RULES[index] = lambda ctx: iter(())
    yield
    base.RULES[index] = connector.vllm_ascend_tp


def test_render_refuses_an_engine_vllm_ascend_would_refuse_even_when_no_rule_does(without_rule_apd403):
    """The backstop behind the rules: with APD403 gone, a vllm-ascend pull deployment with P TP < D TP validates,
    and render still writes nothing."""
    data = example_data("atlas-800i-a2-x4-qwen3-32b")
    data["connector"].update(implementation="vllm-ascend", mode="pull")
    data["instances"][4]["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    data["instances"][5]["devices"] = [{"node": "a2-03", "devices": list(range(8))}]
    for decode in data["instances"][4:]:
        decode["parallel"]["tp"], decode["parallel"]["dp"] = 8, 1
    assert not has_errors(validate(_loaded(data)))
    result = render_bundle(_loaded(data))
    assert result.refused and not result.files
    assert any(d.code == "APD499" and "MooncakeConnectorWorker" in d.message for d in result.diagnostics)


# ---- 100 plans (a third with an int8 cache): what the planner writes, and the same plans under the other
# connectors and the other cache dtype

@pytest.mark.parametrize("block", range(BLOCKS))
def test_every_engine_of_100_plans_starts_under_vllm_ascend_or_validation_says_why(block):
    """Each plan as written must validate and start; under vllm-ascend's connectors or with an int8 cache it may be
    refused, but only by a validation rule: render never writes an engine vllm-ascend refuses."""
    engines = 0
    for seed in plan_seeds()[block::BLOCKS]:
        plan = fuzzed_plan(seed)
        variants = [plan] + [copy.deepcopy(plan) for _ in range(3)]
        variants[1]["connector"].update(implementation="vllm-ascend", mode="pull")
        variants[2]["connector"].update(implementation="vllm-ascend", mode="push")
        variants[3]["model"]["kv_cache_dtype"] = "bf16" if plan["model"]["kv_cache_dtype"] == "int8" else "int8"
        for index, data in enumerate(variants):
            accepted, found, connected = _checked(data)
            assert accepted or index > 0, f"seed {seed}: the planner wrote a deployment validation refuses"
            assert found == [], f"seed {seed}, variant {index}: " + "\n".join(r.describe() for r in found)
            engines += connected
    assert engines > 0  # at least some plans of each block are disaggregated and were checked
