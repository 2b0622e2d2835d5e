"""The autoscaler's decisions from saved windows: agreement, cooldown, dry run, an unreadable proxy, and the metrics
they leave. (Applying a change is tested with a real proxy in tests/integration/autoscale.)"""

import io
import json
from collections import Counter
from pathlib import Path

from prometheus_client import generate_latest

from ascend_pd.autoscale.loop import AutoscaleMetrics, Autoscaler
from ascend_pd.autoscale.settings import AutoscaleSettings, RolloutTimeouts
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
    workload = Workload(input_tokens=LengthDistribution(mean=64), output_tokens=LengthDistribution(mean=128), rate=5)
    deployment = make_plan(cost_model(example, CALIBRATION), PlanInputs(
        workload, SLO(ttft_ms=3000, tpot_ms=15, attainment=0.9), rate=5, kv_mode="pull")).deployment
    file = tmp_path / "deployment.yaml"
    file.write_text(dump_deployment(deployment))
    metrics = AutoscaleMetrics()
    # no engine ever answers here: a change applied where a test expects none fails in seconds, not at the timeout
    made = Autoscaler(file, str(observed), None, Launcher(tmp_path, node_command=node_command), AutoscaleSettings(
        calibration=CALIBRATION, **settings), RolloutLog(io.StringIO()), metrics,
        timeouts=RolloutTimeouts(start=5.0, drain=5.0, command=10.0), clock=clock)
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
    window(observed, 64, 128, 5.5)  # a third decode instance for the headroom; 2 still carry 5.5 req/s: not urgent
    first = made.tick()
    window(observed, 64, 128, 4.0)  # back to what runs, with the predictor's margin from the jump before
    assert (first, made.tick()) == ("wait", "hold") and made._pending is None


def test_a_failed_launch_stops_the_change_and_the_deployment_file_says_what_runs(tmp_path):
    observed = window(tmp_path / "w.json", 64, 128, 7.0)  # 2 decode instances cannot carry it: urgent, at once
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


def write_window(path: Path, prompt: int, output: int, rate: float, **extra) -> Path:
    window(path, prompt, output, rate)
    document = json.loads(path.read_text())
    document.update(extra)
    path.write_text(json.dumps(document))
    return path


def test_a_window_a_restarted_worker_watched_only_in_part_is_not_urgent(tmp_path):
    """7 req/s is past what 2 decode instances carry: urgent, applied at once, on a whole window. When a proxy
    worker (or replica) started within the window, its rate is its own short span's: it waits for agreement."""
    observed = write_window(tmp_path / "w.json", 64, 128, 7.0, partial=True)
    made, _ = scaler(tmp_path, observed, node_command="false", agree=2)
    assert made.tick() == "wait"
    assert made.log.lines[-1]["why"] == "proposed 1 of 2 intervals in a row" and not made.log.lines[-1]["urgent"]


def test_going_straight_back_waits_the_reversal_hold_unless_urgent(tmp_path):
    observed = window(tmp_path / "w.json", 64, 128, 5.5)  # a third decode instance for the headroom; not urgent
    now = [10_000.0]
    made, _ = scaler(tmp_path, observed, clock=lambda: now[0], agree=1, cooldown=60.0, reversal_hold=1800.0,
                     dry_run=False, node_command="false")
    running = load_deployment(made.deployment_file).deployment
    from ascend_pd.planner.resize import counts_of

    three = Counter(counts_of(running))
    (decode_key,) = [k for k in three if k[0] == "decode"]
    three[decode_key] += 1
    made._last_change, made._last_from = now[0] - 600.0, frozenset(three.items())  # it was just shrunk from 3
    assert made.tick() == "wait"
    assert made.log.lines[-1]["why"].startswith("it would undo the change of 600 s ago")
    now[0] += 1800.0  # past the hold: the same proposal goes ahead (and fails here at its launch)
    assert made.tick() == "failed"


def test_an_idle_deployment_shrinks_to_its_minimum(tmp_path):
    idle = write_window(tmp_path / "w.json", 64, 128, 0.0, requests=0, finished=0)
    made, metrics = scaler(tmp_path, idle, dry_run=True, agree=2)
    assert [made.tick() for _ in range(2)] == ["wait", "wait"]
    last = made.log.lines[-1]
    assert last["why"] == "dry run" and "shrink to the minimum" in last["reasons"][0], last
    assert 'ascend_pd_autoscale_planned_instances{role="decode"} 1.0' in generate_latest(metrics.registry).decode()
    # a window in which a worker started says nothing of idleness
    write_window(idle, 64, 128, 0.0, requests=0, finished=0, partial=True)
    assert made.tick() == "unobservable"


def test_the_bounds_hold_a_change_within_them(tmp_path):
    from ascend_pd.autoscale.bounds import Bounds

    observed = window(tmp_path / "w.json", 64, 128, 5.5)  # the plan wants a third decode instance
    made, _ = scaler(tmp_path, observed, agree=1, bounds=Bounds(maximum={"decode": 2}))
    assert made.tick() == "hold"
    assert any("held within the bounds" in reason for reason in made.log.lines[-1]["reasons"])


def test_a_colocated_deployment_does_not_inherit_the_disaggregated_ones_correction(tmp_path):
    """The correction found on P/D engines (here 3x slower decode than the cost model) says nothing of colocated
    engines, which run both phases at other batch sizes: after a change of kind it starts again from 1."""
    from ascend_pd.planner.replan import Correction

    observed = window(tmp_path / "w.json", 64, 128, 4.5)
    made, _ = scaler(tmp_path, observed, dry_run=True)
    made.tick()
    made._corrections["disaggregated"] = Correction(1.0, 3.0, "measured earlier", True)
    made.tick()
    assert made.log.lines[-1]["correction"]["decode_scale"] == 3.0  # the running kind keeps its own
    running = load_deployment(made.deployment_file).deployment
    decode = next(i for i in running.instances if i.role == "decode")
    made.deployment_file.write_text(dump_deployment(running.model_copy(update={"instances": [
        decode.model_copy(update={"role": "colocated", "name": "colocated-0", "engine_id": "colocated-0"})]})))
    made.tick()
    assert made.log.lines[-1]["correction"]["decode_scale"] == 1.0, made.log.lines[-1]


def test_the_device_budget_is_the_plans_budget(tmp_path):
    from ascend_pd.autoscale.bounds import Bounds

    observed = window(tmp_path / "w.json", 64, 128, 5.5)  # a third decode instance: 4 devices
    made, _ = scaler(tmp_path, observed, agree=1, dry_run=True)
    assert made.tick() == "wait"
    assert made.log.lines[-1]["planned"] == "1 x P TP1xDP1 + 3 x D TP1xDP1"  # 4 devices
    capped, _ = scaler(tmp_path, observed, agree=1, dry_run=True, bounds=Bounds(max_devices=3))
    assert capped.tick() == "hold"
    assert any("within 3 of its devices meets" in reason for reason in capped.log.lines[-1]["reasons"])


def test_the_loop_ticks_every_interval_counted_from_the_start_of_each_tick(tmp_path):
    observed = window(tmp_path / "w.json", 64, 128, 4.5)
    now = [0.0]
    made, metrics = scaler(tmp_path, observed, clock=lambda: now[0], interval=60.0)
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    made.tick = lambda real=made.tick: (now.__setitem__(0, now[0] + 2.5), real())[1]  # each tick takes 2.5 s
    made.run(intervals=3, sleep=sleep)
    assert slept == [57.5, 57.5]  # none after the last
    assert 'ascend_pd_autoscale_decisions_total{decision="hold"} 3.0' in generate_latest(metrics.registry).decode()
