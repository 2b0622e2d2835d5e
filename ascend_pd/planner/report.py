"""What `ascend-pd plan --out DIR` writes: deployment.yaml, plan.json, report.md, pareto.csv, pareto.png and
placement.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ascend_pd.deploy import dump_deployment
from ascend_pd.deploy.connector_needs import needs_sentence
from ascend_pd.deploy.file_schemas import with_schema_beside
from ascend_pd.perf.calibration import VALUE_FIELDS, pricing_sentence
from ascend_pd.perf.cost import CostModel
from ascend_pd.hardware.platform import platform_of
from ascend_pd.perf.published import nearest_rows
from ascend_pd.planner.capacity import Option
from ascend_pd.planner.modes import planned_modes
from ascend_pd.planner.pareto import Point, frontier, pareto_points, write_csv, write_png
from ascend_pd.planner.placement_map import write_placement_png
from ascend_pd.planner.plan import PlanOutcome
from ascend_pd.planner.proxy_sizing import proxy_cores
from ascend_pd.planner.search import Choice


def _option_json(option: Option, count: int) -> dict[str, Any]:
    s = option.shape
    out: dict[str, Any] = {"count": count, "parallel": {"tp": s.tp, "dp": s.dp, "ep": s.ep, "pp": s.pp},
                           "devices_per_instance": s.devices, "rate_rps_per_instance": option.rate}
    if option.role != "prefill":
        out.update(batch_per_rank=option.batch_per_rank, tpot_ms=option.tpot * 1e3)
    if option.role == "colocated":
        out["chunk_tokens"] = option.chunk_tokens
    return out


def choice_json(choice: Choice, units: int) -> dict[str, Any]:
    return {"kind": choice.kind, "label": choice.label(), "serving_groups": units,
            "rate_rps": choice.rate * units, "devices": choice.devices * units,
            "rate_rps_per_device": choice.rate_per_device,
            **{o.role: _option_json(o, n * units) for o, n in choice.instances}}


def comparison(outcome: PlanOutcome) -> dict[str, Any]:
    """Disaggregated against colocated on the same budget: which sustains more, and by how much."""
    r = outcome.result
    dis, col = r.best_disaggregated, r.best_colocated
    out: dict[str, Any] = {"chosen": r.best.kind}
    for kind, choice in (("disaggregated", dis), ("colocated", col)):
        out[f"{kind}_rate_rps"] = choice.rate * r.units if choice else None
        out[f"{kind}_devices"] = choice.devices * r.units if choice else None
        out[f"{kind}_rate_rps_per_device"] = choice.rate_per_device if choice else None
    if dis and col:
        winner, loser = (dis, col) if dis.rate_per_device >= col.rate_per_device else (col, dis)
        out["advantage"] = winner.rate_per_device / loser.rate_per_device - 1
    return out


def versus(cmp: dict[str, Any]) -> str:
    return " vs ".join(f"{kind} {cmp[f'{kind}_rate_rps']:.2f} req/s on {cmp[f'{kind}_devices']} devices"
                       for kind in ("disaggregated", "colocated"))


def plan_json(cost: CostModel, outcome: PlanOutcome) -> dict[str, Any]:
    r, req = outcome.result, outcome.requirements
    best = choice_json(r.best, r.units)
    return {
        "model": cost.model.id, "quantization": cost.quantization, "kv_cache_dtype": cost.kv_dtype,
        "cluster": cost.cluster.name, "chip": cost.chip.id, "device_budget": outcome.budget,
        "workload": outcome.deployment.workload.model_dump(mode="json", exclude_none=True),
        "slo": outcome.deployment.slo.model_dump(mode="json"),
        "mtp": {"draft_tokens": req.mtp, "acceptance": req.mtp_acceptance},
        "max_model_len": req.max_model_len,
        "predicted": outcome.predicted,
        "kind": r.best.kind,
        "prefill": best.get("prefill"), "decode": best.get("decode"), "colocated": best.get("colocated"),
        "comparison": comparison(outcome),
        "alternatives": [choice_json(c, r.units) for c in r.alternatives],
        "proxy": _proxy_json(outcome),
        "search_seconds": outcome.search_seconds,
        "calibration": {"profile": cost.cal.name, "vllm_ascend": cost.cal.engine_version, "era": cost.cal.era,
                        "values": {name: getattr(cost.cal, name) for name in VALUE_FIELDS}},
        "connector": outcome.deployment.connector.model_dump(mode="json"),
        "trust": _trust(cost, outcome),
    }


def _trust(cost: CostModel, outcome: PlanOutcome) -> list[dict[str, Any]]:
    """Per role of the plan: the execution mode it is priced in, and the published rows of the calibration profile
    nearest to it, each with the error the profile made there without that row's source."""
    modes = planned_modes(platform_of(cost.cluster), outcome.requirements.mtp, cost.model.mla is not None)
    out = []
    for option, _ in outcome.result.best.instances:
        role, mode = option.role, modes[option.role]
        near = nearest_rows(cost.cal.name, "ttft" if role == "prefill" else "tpot", cost.model, cost.chip.id,
                            cost.quantization, option.shape, mode)
        out.append({"role": role, "mode": mode.label(),
                    "nearest": [{"row": r.label, "source": r.source, "metric": r.metric,
                                 "error_without_its_source": r.error} for r in near]})
    return out


def _proxy_json(outcome: PlanOutcome) -> dict[str, Any]:
    req, workload = outcome.requirements, outcome.deployment.workload
    mean_output = float(req.lengths.output_tokens.mean())
    return {"workers": outcome.deployment.proxy.workers,
            "cores_at_rate": proxy_cores(workload.rate, mean_output, req.accepted),
            "sse_events_per_s": workload.rate * mean_output / req.accepted}


def connector_line(data: dict[str, Any]) -> str:
    """What the plan's KV connector needs on the nodes (deploy/connector_needs.py), or that none runs."""
    if data["kind"] == "colocated":
        return "Colocated: no KV moves between engines, so none loads a KV connector."
    return needs_sentence(**data["connector"])


def _report_md(data: dict[str, Any], deployment_name: str) -> str:
    p, cmp, priced = data["predicted"], data["comparison"], data["calibration"]
    lines = [f"# Plan: {data['model']} on {data['cluster']}", "",
             f"Workload: {json.dumps(data['workload'])}", f"SLO: {json.dumps(data['slo'])}", "",
             f"Chosen: **{data['kind']}**, using {p['devices']} of {data['device_budget']} devices.", ""]
    for role in ("prefill", "decode", "colocated"):
        part = data[role]
        if part:
            shape = part["parallel"]
            extra = f", batch {part['batch_per_rank']} per DP rank, TPOT {part['tpot_ms']:.1f} ms" \
                if "batch_per_rank" in part else ""
            lines.append(f"- {part['count']} x {role} TP{shape['tp']} DP{shape['dp']} EP{shape['ep']} "
                         f"({part['devices_per_instance']} devices, {part['rate_rps_per_instance']:.2f} req/s each"
                         f"{extra})")
    lines += ["", "## Predicted", "",
              f"- at {p['rate_rps']:.2f} req/s; the most it sustains within the SLO: {p['max_rate_rps']:.2f} req/s",
              f"- goodput: {p['goodput_rps']:.2f} req/s ({p['goodput_per_device']:.4f} req/s per device), "
              f"SLO attainment {p['slo_attainment']:.1%}",
              f"- TTFT p50/p90/p99: {p['ttft_ms']['p50']:.0f} / {p['ttft_ms']['p90']:.0f} / "
              f"{p['ttft_ms']['p99']:.0f} ms; TPOT at the planned batch: {p['tpot_ms']:.1f} ms",
              f"- output tokens/s per device: {p['output_tokens_per_s_per_device']:.1f}",
              f"- proxy: {data['proxy']['cores_at_rate']:.1f} cores of CPU at this rate "
              f"({data['proxy']['sse_events_per_s']:,.0f} streamed events/s), so {data['proxy']['workers']} worker "
              "processes (`proxy.workers`); spread them over replicas (`proxy.extra_nodes`) where one node cannot "
              "spare the cores", "",
              "## Disaggregated or colocated", ""]
    if cmp.get("advantage") is not None:
        other = "colocated" if cmp["chosen"] == "disaggregated" else "disaggregated"
        why = ("prefill and decode scale separately and decode batches are not slowed by prompt chunks"
               if cmp["chosen"] == "disaggregated" else
               "at this load and prompt length the KV transfer and the split of devices cost more than chunked "
               "prefill slows decode")
        lines.append(f"{cmp['chosen'].capitalize()} sustains {cmp['advantage']:.0%} more requests per device than "
                     f"the best {other} deployment within the same budget: {versus(cmp)}; {why}.")
    else:
        lines.append(f"Only {cmp['chosen']} deployments meet the SLO on this budget.")
    lines += ["", "## Alternatives", "", "| configuration | req/s | devices | req/s per device |", "|---|---|---|---|"]
    for alt in data["alternatives"]:
        lines.append(f"| {alt['label']} | {alt['rate_rps']:.2f} | {alt['devices']} "
                     f"| {alt['rate_rps_per_device']:.4f} |")
    lines += ["", f"Files: deployment.yaml (`ascend-pd validate`, `ascend-pd simulate`), plan.json, pareto.csv, "
              f"pareto.png, placement.png, deployment.schema.json (the JSON Schema deployment.yaml's first line "
              f"names, for YAML editors). Deployment name: {deployment_name}.", "",
              f"{pricing_sentence(priced['profile'], priced['vllm_ascend'])} Its values are in plan.json.",
              "",
              "## Connector", "", connector_line(data), ""]
    lines += _trust_md(data["trust"], data["calibration"]["profile"])
    return "\n".join(lines)


def _trust_md(trust: list[dict[str, Any]], profile: str) -> list[str]:
    lines = ["## How far to trust the figures", ""]
    for part in trust:
        lines.append(f"- {part['role']}: priced in {part['mode']}, the mode its rendered flags give it (graph mode, "
                     "and async scheduling where it is on)")
    rows = [(part["role"], near) for part in trust for near in part["nearest"]]
    if not rows:
        return lines + ["", f"`{profile}` has no published rows to compare with: measure your deployment and fit "
                        "it with `ascend-pd calibrate`.", ""]
    lines += ["", f"The published rows of `{profile}` nearest to this plan, and the error the profile made on each "
              "when fitted without its source (docs/planner.md lists them all):", "",
              "| role | row | source | error without its source |", "|---|---|---|---|"]
    for role, near in rows:
        error = "-" if near["error_without_its_source"] is None else f"{near['error_without_its_source']:+.0%}"
        lines.append(f"| {role} | {near['row']} ({near['metric'].upper()}) | {near['source']} | {error} |")
    return lines + ["", "`ascend-pd calibrate` on your own `vllm bench serve` results takes the profile the last "
                    "few percent.", ""]


def write_outputs(cost: CostModel, outcome: PlanOutcome, out_dir: Path) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    deployment_file = out_dir / "deployment.yaml"
    deployment_file.write_text(with_schema_beside("deployment", deployment_file, dump_deployment(outcome.deployment)),
                               encoding="utf-8")
    data = plan_json(cost, outcome)
    points = pareto_points(cost, outcome.requirements, outcome.result.options)
    front = frontier(points)
    write_csv(front, out_dir / "pareto.csv")
    mean_output = float(outcome.requirements.lengths.output_tokens.mean())
    p = outcome.predicted
    chosen = Point(p["output_tokens_per_s_per_device"], 1e3 / p["tpot_ms"], outcome.result.best.kind, "plan",
                   p["tpot_ms"]) if p["tpot_ms"] > 0 and mean_output > 0 else None
    write_png(points, front, chosen, f"{cost.model.id} on {cost.cluster.name} ({outcome.budget} devices)",
              out_dir / "pareto.png")
    write_placement_png(outcome.deployment, cost.cluster, f"{cost.model.id} on {cost.cluster.name}: where each "
                        "instance runs", out_dir / "placement.png")
    data["pareto_frontier_points"] = len(front)
    (out_dir / "plan.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    (out_dir / "report.md").write_text(_report_md(data, outcome.deployment.metadata.name), encoding="utf-8")
    return data
