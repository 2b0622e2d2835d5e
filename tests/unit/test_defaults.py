"""Planning and serving defaults are typed once, in ascend_pd/defaults.py. The copies that a reader meets elsewhere
(pydantic field defaults, click option defaults and help, dataclass and signature defaults) must equal them."""

import ast
import inspect
from pathlib import Path

import click
import pytest

from ascend_pd import defaults
from ascend_pd.cli.main import cli
from ascend_pd.deploy.schema import SLO, Proxy, VllmArgs

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_import_nothing_so_every_layer_may_read_them():
    tree = ast.parse((ROOT / "ascend_pd/defaults.py").read_text())
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imports == []


def test_each_default_carries_a_comment_naming_its_source():
    for line in (ROOT / "ascend_pd/defaults.py").read_text().splitlines():
        if line and line[0].isupper() and " = " in line:
            comment = line.partition("  # ")[2]
            sources = ("vLLM", "vllm-ascend", "arXiv", "planner choice", "measured, bench_")
            assert any(source in comment for source in sources), line


def test_deployment_schema_defaults_are_the_constants():
    assert Proxy.model_fields["port"].default == defaults.PROXY_PORT
    assert Proxy.model_fields["policy"].default == defaults.PROXY_POLICY
    assert Proxy(node="n").policy == defaults.PROXY_POLICY
    assert VllmArgs.model_fields["gpu_memory_utilization"].default == defaults.GPU_MEMORY_UTILIZATION
    assert VllmArgs.model_fields["max_num_batched_tokens"].default == defaults.PREFILL_BATCH_TOKENS
    assert SLO.model_fields["attainment"].default == defaults.SLO_ATTAINMENT


def option(command_name: str, param_name: str) -> click.Option:
    command = cli.get_command(click.Context(cli), command_name)
    return next(p for p in command.params if p.name == param_name)


@pytest.mark.parametrize("command_name", ["plan", "simulate", "estimate"])
def test_mtp_acceptance_flag_defaults_to_the_constant_and_shows_it(command_name):
    flag = option(command_name, "mtp_acceptance")
    assert flag.default == defaults.MTP_ACCEPTANCE
    assert flag.show_default is True


def test_help_texts_quote_the_constants():
    assert f"else {defaults.PROXY_PORT}]" in option("proxy", "port").help
    plan_help = cli.get_command(click.Context(cli), "plan").help
    assert f"SLO TTFT {defaults.SLO_TTFT_MS} ms, TPOT {defaults.SLO_TPOT_MS} ms" in plan_help
    assert f"{defaults.SLO_ATTAINMENT:.0%} attainment" in plan_help


def test_proxy_defaults_are_the_constants():
    from ascend_pd.proxy.backend_choice import choose_backends
    from ascend_pd.proxy.settings import ProxySettings

    settings = ProxySettings()
    assert (settings.prefill_policy, settings.decode_policy) == (defaults.PROXY_POLICY, defaults.PROXY_POLICY)
    chosen = choose_backends(prefill=["http://127.0.0.1:8100"], decode=["http://127.0.0.1:8200"])
    assert (chosen.port, chosen.policy) == (defaults.PROXY_PORT, defaults.PROXY_POLICY)


def test_planner_defaults_are_the_constants():
    from ascend_pd.planner import capacity, deployment_simulation, placement, simulator
    from ascend_pd.planner.plan import PlanInputs
    from ascend_pd.planner.workload import DEFAULT_SLO

    assert (DEFAULT_SLO.ttft_ms, DEFAULT_SLO.tpot_ms, DEFAULT_SLO.attainment) == (
        defaults.SLO_TTFT_MS, defaults.SLO_TPOT_MS, defaults.SLO_ATTAINMENT)
    assert PlanInputs.__dataclass_fields__["mtp_acceptance"].default == defaults.MTP_ACCEPTANCE
    for fn in (simulator.Simulation.__init__, simulator.simulate, deployment_simulation.simulate_deployment_file):
        assert inspect.signature(fn).parameters["mtp_acceptance"].default == defaults.MTP_ACCEPTANCE, fn
    assert (capacity.DECODE_SLOT_UTILISATION, capacity.KV_HEADROOM, capacity.MAX_SEQS_PER_RANK,
            capacity.PREFILL_BATCH_TOKENS) == (defaults.DECODE_SLOT_UTILISATION, defaults.KV_HEADROOM,
                                               defaults.MAX_SEQS_PER_RANK, defaults.PREFILL_BATCH_TOKENS)
    assert placement.PROXY_PORT == defaults.PROXY_PORT


def test_memory_defaults_are_the_constants():
    from ascend_pd.perf import memory
    from ascend_pd.perf.cost import CostModel

    assert memory.RUNTIME_RESERVE_BYTES == defaults.RUNTIME_RESERVE_BYTES
    for fn in (memory.memory_fit, CostModel.memory, CostModel.max_decode_batch):
        assert inspect.signature(fn).parameters["gpu_memory_utilization"].default == defaults.GPU_MEMORY_UTILIZATION


# Options of these commands whose default lives only in the CLI: there is no library value they could copy.
CLI_ONLY_DEFAULTS = {"--metrics-port", "--host", "--event-loop", "--log-level", "--target", "--copy-command"}


@pytest.mark.parametrize("module", ["proxy", "autoscale"])
def test_proxy_and_autoscale_options_take_their_defaults_from_the_settings_not_a_literal(module):
    """A literal in a click option's default is a second copy of the settings' default: it fails here."""
    tree = ast.parse((ROOT / f"ascend_pd/cli/{module}.py").read_text())
    copies = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "option"):
            continue
        flag = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None
        default = next((kw.value for kw in call.keywords if kw.arg == "default"), None)
        if (isinstance(default, ast.Constant) and default.value is not None and not isinstance(default.value, bool)
                and flag not in CLI_ONLY_DEFAULTS):
            copies.append(f"{flag}={default.value!r} (line {call.lineno})")
    assert not copies, f"ascend_pd/cli/{module}.py types defaults the settings already hold: {copies}"


def test_proxy_options_show_the_proxy_settings_defaults():
    from ascend_pd.proxy.settings import BackendTimeouts, ProxySettings

    settings, timeouts = ProxySettings(), BackendTimeouts()
    for name in ("max_inflight", "prefill_attempts", "pair_attempts", "health_interval", "engine_load_interval",
                 "workload_window"):
        assert option("proxy", name).default == getattr(settings, name), name
    for name in ("connect", "read", "total"):
        assert option("proxy", f"{name}_timeout").default == getattr(timeouts, name), name


def test_autoscale_options_show_the_loop_settings_defaults():
    from ascend_pd.autoscale.settings import DEFAULT_KUBECTL, DEFAULT_NODE_COMMAND, AutoscaleSettings, RolloutTimeouts

    settings, timeouts = AutoscaleSettings(), RolloutTimeouts()
    for name in ("interval", "agree", "cooldown", "headroom", "min_gain", "min_saving", "shrink_margin"):
        assert option("autoscale", name).default == getattr(settings, name), name
    assert (option("autoscale", "start_timeout").default, option("autoscale", "drain_timeout").default) == (
        timeouts.start, timeouts.drain)
    assert (option("autoscale", "node_command").default, option("autoscale", "kubectl").default) == (
        DEFAULT_NODE_COMMAND, DEFAULT_KUBECTL)
