"""`ascend-pd estimate`: TTFT or TPOT, throughput and memory of one fixed prefill or decode instance shape."""

from __future__ import annotations

import json

import click

from ascend_pd.cli.common import calibration_option, input_errors_exit_2, version_option
from ascend_pd.defaults import MTP_ACCEPTANCE

GIB = 1024**3


@click.command("estimate")
@click.option("--model", required=True, help="catalog id (`ascend-pd models`) or a directory holding config.json")
@click.option("--chip", default=None,
              help="chip id, e.g. 910c or 910b3 (default: the cluster's chip; on a cluster that mixes chips, required: "
                   "the estimate prices that chip's nodes)")
@click.option("--cluster", default=None,
              help="shipped cluster name or YAML path, for the link tiers (default: cloudmatrix384, or the first "
                   "shipped cluster built from --chip)")
@click.option("--quant", type=click.Choice(["bf16", "w8a8", "w4a8", "w4a16"]), default=None,
              help="weight quantization (default: w8a8 for models whose bf16 weights exceed half a node, else bf16)")
@click.option("--kv-dtype", type=click.Choice(["bf16", "int8"]), default="bf16", show_default=True)
@click.option("--role", type=click.Choice(["prefill", "decode"]), required=True)
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--ep", type=click.IntRange(min=1), default=1, show_default=True,
              help="expert-parallel group size (1: experts shard over TP)")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--batch-per-device", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="decode: sequences per device")
@click.option("--context", type=click.IntRange(min=1), required=True,
              help="tokens per sequence: the mean context decode reads, or the prompt length for prefill")
@click.option("--prompt-len", type=click.IntRange(min=1), default=None, help="prefill: tokens per prompt")
@click.option("--batch-tokens", type=click.IntRange(min=1), default=None,
              help="prefill: tokens batched per device in one step (default: one prompt per DP rank)")
@click.option("--burst", type=click.IntRange(min=1), default=None,
              help="prefill: also the mean TTFT of this many prompts arriving together at each DP rank, prefilled "
                   "--batch-tokens per device a step (default: the max_num_batched_tokens a plan renders)")
@click.option("--mtp", type=click.IntRange(min=0), default=0, show_default=True, help="draft tokens per step")
@click.option("--mtp-acceptance", type=click.FloatRange(0, 1), default=MTP_ACCEPTANCE, show_default=True,
              help="probability each draft token is accepted")
@click.option("--graph", type=click.Choice(["eager", "piecewise", "full"]), default=None,
              help="graph mode of decode steps (default: the one ascend-pd renders for the role: prefill eager, "
                   "decode full, i.e. FULL_DECODE_ONLY; eager on vllm-cpu)")
@click.option("--async-scheduling/--no-async-scheduling", "async_scheduling", default=None,
              help="the host schedules a step while the device runs the one before (default: as the rendered "
                   "engine runs, on unless the platform or the draft turns it off)")
@calibration_option
@version_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@input_errors_exit_2
def estimate_cmd(model, chip, cluster, quant, kv_dtype, role, tp, dp, ep, pp, batch_per_device, context, prompt_len,
                 batch_tokens, burst, mtp, mtp_acceptance, graph, async_scheduling, calibration, vllm_ascend_version,
                 fmt) -> None:
    """Estimate one instance shape with the cost model and a calibration profile (--calibration), in the execution
    mode the engine ascend-pd renders for the role would run (--graph and --[no-]async-scheduling change it)."""
    from dataclasses import replace

    from ascend_pd.hardware.platform import platform_of
    from ascend_pd.perf.context import cost_model
    from ascend_pd.perf.estimate import EstimateRequest, estimate
    from ascend_pd.perf.exec_mode import ExecMode
    from ascend_pd.perf.shape import Shape
    from ascend_pd.planner.modes import planned_modes

    cost = cost_model(model, cluster, chip, quant, kv_dtype, calibration, vllm_ascend_version)
    modes = planned_modes(platform_of(cost.cluster), mtp, cost.model.mla is not None, cost.cal.engine_version)
    rendered = modes[role]
    cost = replace(cost, mode=ExecMode(graph or rendered.decode_graph,
                                       rendered.async_scheduling if async_scheduling is None else async_scheduling))
    result = estimate(cost, EstimateRequest(role=role, shape=Shape(tp, dp, ep, pp), context=context,
                                            batch_per_device=batch_per_device, prompt_len=prompt_len,
                                            batch_tokens=batch_tokens, mtp=mtp, mtp_acceptance=mtp_acceptance,
                                            burst=burst or 0))
    if fmt == "json":
        click.echo(json.dumps(result, indent=2))
        return
    _print_text(result)


def _print_text(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    p = result["parallel"]
    table = Table(title=f"{result['model']} {result['quantization']} on {result['chip']}: {result['role']} "
                        f"TP{p['tp']} DP{p['dp']} EP{p['ep']} PP{p['pp']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("execution mode", result["execution_mode"]), ("step", f"{result['step_ms']:.2f} ms")]
    if "ttft_ms" in result:
        rows += [("TTFT at the client (one batch, no queueing)", f"{result['ttft_ms']:.1f} ms"),
                 ("  of it the server's request path", f"{result['request_overhead_ms']:.1f} ms")]
    if "burst_ttft_ms" in result:
        rows.append((f"mean TTFT of {result['burst_prompts_per_rank']} prompts at once per DP rank, "
                     f"{result['burst_step_tokens']} tokens a step", f"{result['burst_ttft_ms']:.1f} ms"))
    if "tpot_ms" in result:
        rows += [("TPOT", f"{result['tpot_ms']:.2f} ms"), ("batch per DP rank", f"{result['batch_per_rank']:g}"),
                 ("largest batch per DP rank that fits", str(result["max_batch_per_rank"]))]
    rows.append(("tokens/s per device", f"{result['tokens_per_s_per_device']:,.0f}"))
    if "tokens_per_s_per_package" in result:
        rows.append(("tokens/s per package", f"{result['tokens_per_s_per_package']:,.0f}"))
    rows += [("KV bytes per token", f"{result['kv_bytes_per_token']:,}"),
             ("memory per device", f"{result['memory_per_device_bytes'] / GIB:.1f} GiB of "
                                   f"{result['memory_budget_per_device_bytes'] / GIB:.1f} GiB"),
             ("fits", "yes" if result["fits"] else "NO")]
    for name, value in rows:
        table.add_row(name, value)
    for name, seconds in result["breakdown"].items():
        table.add_row(f"  {name.replace('_', ' ')}", f"{seconds * 1e3:.2f} ms")
    Console().print(table)
