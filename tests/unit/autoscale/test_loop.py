"""The autoscaler's decisions from saved windows: agreement, cooldown, dry run, an unreadable proxy, and the metrics
they leave. (Applying a change is tested with a real proxy in tests/integration/autoscale.)"""

import io
import json
from pathlib import Path

from prometheus_client import generate_latest

from ascend_pd.autoscale.loop import AutoscaleMetrics, Autoscaler
from ascend_pd.autoscale.settings import AutoscaleSettings
from ascend_pd.autoscale.rollout import Launcher, RolloutLog
from ascend_pd.deploy.io import dump_deployment, load_deployment

ROOT = Path(__file__).resolve().parents[3]
CALIBRATION = str(ROOT / "docs" / "calibration-cpu" / "calibration.yaml")


def window(path: Path, prompt: int, output: int, rate: float) -> Path:
    spread = lambda v: {"mean": v, "p50": v, "p90": v, "p99": v}  # noqa: E731
    path.write_text(json.dumps({"window_seconds": 60, "requests": int(rate * 60), "finished": int(rate * 60),
                                "failed": 0, "rate_rps": rate, "prompt_tokens": spread(prompt),
                                "output_tokens": spread(output), "ttft_seconds": None, "tpot_seconds": None,
                                "streamed": 0}))
    return path


def scaler(tmp_path: Path, observed: Path, clock=lambda: 0.0, node_command: str = "",
           **settings) -> tuple[Autoscaler, AutoscaleMetrics]:
    from ascend_pd.planner.plan import PlanInputs, make_plan
    from ascend_pd.planner.replan import cost_model
    from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload

    example = load_deployment(ROOT / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml")
    workload = Workload(input_tokens=LengthDistribution(mean=64), output_tokens=LengthDistribution(mean=128), rate=6)
    deployment = make_plan(cost_model(example, CALIBRATION), PlanInputs(
        workload, SLO(ttft_ms=3000, tpot_ms=15, attainment=0.9), rate=6, kv_mode="pull")).deployment
    file = tmp_path / "deployment.yaml"
    file.write_text(dump_deployment(deployment))
    metrics = AutoscaleMetrics()
    made = Autoscaler(file, str(observed), None, Launcher(tmp_path, node_command=node_command), AutoscaleSettings(
        calibration=CALIBRATION, **settings), RolloutLog(io.StringIO()), metrics, clock=clock)
    return made, metrics


def test_a_change_waits_in_a_dry_run_and_the_metrics_say_so(tmp_path):
    rag = window(tmp_path / "w.json", 512, 16, 2.0)
    made, metrics = scaler(tmp_path, rag, dry_run=True, agree=1)
    assert [made.tick() for _ in range(3)] == ["wait"] * 3
    text = generate_latest(metrics.registry).decode()
    assert 'ascend_pd_autoscale_decisions_total{decision="wait"} 3.0' in text
    assert 'ascend_pd_autoscale_planned_instances{role="prefill"} 2.0' in text
    assert 'ascend_pd_autoscale_instances{role="prefill"} 1.0' in text


def test_a_change_within_the_cooldown_waits(tmp_path):
    rag = window(tmp_path / "w.json", 512, 16, 2.0)
    now = [1000.0]
    made, _ = scaler(tmp_path, rag, clock=lambda: now[0], cooldown=300.0)
    made._last_change = 900.0
    assert made.tick() == "wait"
    assert made.log.lines[-1]["why"] == "cooldown"


def test_a_hold_breaks_the_agreement(tmp_path):
    observed = tmp_path / "w.json"
    made, _ = scaler(tmp_path, observed, agree=2)
    window(observed, 64, 128, 6.8)  # a third decode instance for the headroom; 2 still carry 6.8 req/s: not urgent
    first = made.tick()
    window(observed, 64, 128, 5.0)  # back to what runs
    assert (first, made.tick()) == ("wait", "hold") and made._pending is None


def test_a_failed_launch_stops_the_change_and_the_deployment_file_says_what_runs(tmp_path):
    observed = window(tmp_path / "w.json", 64, 128, 9.0)  # 2 decode instances cannot carry it: urgent, at once
    made, metrics = scaler(tmp_path, observed, node_command="false")  # every node command fails
    before = made.deployment_file.read_text()
    assert made.tick() == "failed"
    failed = [line for line in made.log.lines if line.get("status") == "failed"]
    assert failed[0]["phase"] == "launch" and "exited 1" in failed[0]["error"]
    assert load_deployment(made.deployment_file).deployment == load_deployment_text(before)
    assert 'ascend_pd_autoscale_decisions_total{decision="failed"} 1.0' in generate_latest(metrics.registry).decode()


def load_deployment_text(text: str):
    from ascend_pd.deploy import parse_deployment

    return parse_deployment(text, "before.yaml").deployment


def test_an_unreadable_proxy_is_a_decision_not_a_crash(tmp_path):
    made, metrics = scaler(tmp_path, tmp_path / "missing.json")
    assert made.tick() == "unobservable"
    assert "file not found" in made.log.lines[-1]["error"] or "cannot read" in made.log.lines[-1]["error"]
