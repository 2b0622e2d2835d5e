"""kv_transfer_config carries the fields each connector reads, and this project's connector accepts what we write."""

import pytest

from ascend_pd.connector.config import parse_config

from .conftest import plan_of


def configs(plan):
    return {p.name: p.kv_config for p in plan.processes()}


def test_vllm_ascend_pull_uses_mooncake_connector_v1_with_both_shapes(a3_example):
    kv = configs(plan_of(a3_example))
    assert kv["prefill-0-dp1"] == {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer",
        "kv_port": 36000,
        "engine_id": "prefill-0",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"prefill": {"tp_size": 8, "dp_size": 2}, "decode": {"tp_size": 1, "dp_size": 32}},
    }
    assert kv["decode-0-dp31"]["kv_role"] == "kv_consumer"
    assert kv["decode-0-dp31"]["kv_port"] == 36100


def test_vllm_ascend_push_uses_the_layerwise_connector(a3_example):
    a3_example["connector"]["mode"] = "push"
    kv = configs(plan_of(a3_example))
    assert {c["kv_connector"] for c in kv.values()} == {"MooncakeLayerwiseConnector"}


def test_vllm_ascend_gets_no_module_path_and_ascend_pd_gets_its_own(a3_example, cm384_example):
    assert all("kv_connector_module_path" not in c for c in configs(plan_of(a3_example)).values())
    assert {c["kv_connector_module_path"] for c in configs(plan_of(cm384_example)).values()} == {"ascend_pd.connector"}


def test_ascend_pd_connector_config_names_mode_protocol_and_shapes(cm384_example):
    kv = configs(plan_of(cm384_example))
    assert kv["decode-0-dp0"] == {
        "kv_connector": "AscendPDConnector",
        "kv_connector_module_path": "ascend_pd.connector",
        "kv_role": "kv_consumer",
        "kv_port": 36100,
        "engine_id": "decode-0",
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"mode": "push", "protocol": "ascend",
                                      "ascend_pd_shapes": {"prefill": {"tp_size": 8, "dp_size": 2},
                                                           "decode": {"tp_size": 1, "dp_size": 32}}},
    }


def test_ascend_pd_writes_no_shape_vllm_ascend_would_check_against_the_engine(a2_example):
    """vllm-ascend checks the top-level prefill/decode entries against each engine's own TP and DP, and for a GQA
    model asserts prefill TP % decode TP == 0 whatever the connector: ascend-pd's shapes go under their own key."""
    for kv in configs(plan_of(a2_example)).values():
        extra = kv["kv_connector_extra_config"]
        assert "prefill" not in extra and "decode" not in extra
        assert extra["ascend_pd_shapes"]["decode"] == {"tp_size": 4, "dp_size": 2}


def test_vllm_ascend_gets_each_dense_engines_own_dp_size_not_the_instances(a2_example):
    """Each DP rank of a dense model is an engine of vLLM DP 1 (no --data-parallel-size)."""
    a2_example["connector"]["implementation"] = "vllm-ascend"
    plan = plan_of(a2_example)
    decode = [p for p in plan.processes() if p.role == "decode"]
    assert decode and all("--data-parallel-size" not in p.argv for p in decode)
    assert {p.kv_config["kv_connector_extra_config"]["decode"]["dp_size"] for p in decode} == {1}


@pytest.mark.parametrize("fixture", ["cm384_example", "cpu_example", "a2_example"])
def test_the_connector_parses_every_config_render_writes(fixture, request):
    """The side-channel port the connector derives for TP rank 0 is the one the plan lists for the process."""
    plan = plan_of(request.getfixturevalue(fixture))
    for process in plan.processes():
        kv = process.kv_config
        config = parse_config(kv["kv_role"], kv["engine_id"], kv["kv_port"], kv["kv_connector_extra_config"])
        # vLLM hands a DP engine its global rank; a stand-alone engine (dense model) is rank 0 of its own.
        vllm_dp_rank = process.dp_rank if "--data-parallel-rank" in process.argv else 0
        assert config.side_channel_port(vllm_dp_rank, process.first_worker) == process.kv_port
        assert config.role == process.role


def test_colocated_instances_get_no_kv_transfer_config(cpu_example):
    cpu_example["instances"] = [cpu_example["instances"][0]]
    cpu_example["instances"][0]["role"] = "colocated"
    process, = plan_of(cpu_example).processes()
    assert process.kv_config is None
    assert "--kv-transfer-config" not in process.argv


@pytest.mark.parametrize("fixture", ["cm384_example", "cpu_example", "a2_example", "a3_example"])
@pytest.mark.parametrize("mode", ["pull", "push"])
def test_every_engine_asks_vllm_to_recompute_a_prompt_whose_kv_failed_to_load(fixture, mode, request):
    """vLLM's default policy, "fail", would fail the request instead."""
    data = request.getfixturevalue(fixture)
    data["connector"]["mode"] = mode
    kv = [c for c in configs(plan_of(data)).values() if c is not None]
    assert kv and all(c["kv_load_failure_policy"] == "recompute" for c in kv)


def test_ascend_pd_prefill_gets_the_abort_timeout_vllm_ascend_gets_from_the_environment(cm384_example, a3_example):
    """AscendPDConnector reads no environment variable for it; vllm-ascend's pull connector reads
    VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, so both implementations free unread KV after the same time."""
    a3_example["connector"]["mode"] = "pull"
    env_values = {dict(n.env).get("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT") for n in plan_of(a3_example).nodes}
    assert len(env_values) == 1 and None not in env_values
    expected = float(env_values.pop())
    prefill = [p.kv_config for p in plan_of(cm384_example).processes() if p.role == "prefill"]
    assert prefill
    for kv in prefill:
        assert "abort_timeout_s" in kv["kv_connector_extra_config"]
        config = parse_config(kv["kv_role"], kv["engine_id"], kv["kv_port"], kv["kv_connector_extra_config"])
        assert config.abort_timeout_s == expected
