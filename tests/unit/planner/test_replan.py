"""Re-planning a running deployment from an observed workload: the fit, the correction, the change and its order."""

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from ascend_pd.deploy import parse_deployment, validate
from ascend_pd.deploy.io import dump_deployment
from ascend_pd.deploy.schema import SLO, LengthDistribution, Workload
from ascend_pd.errors import InputError
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.observed import parse_observed
from ascend_pd.planner.plan import PlanInputs, make_plan, predict, requirements
from ascend_pd.planner.replan import cost_model, deployed_choice, replan
from ascend_pd.planner.resize import counts_of, resize

CALIBRATION = str(Path(__file__).resolve().parents[3] / "docs" / "calibration-cpu" / "calibration.yaml")
SLO_HERE = SLO(ttft_ms=3000, tpot_ms=15, attainment=0.9)
ONE = Shape(tp=1, dp=1)


def planned(prompt: int, output: int, rate: float):
    workload = Workload(input_tokens=LengthDistribution(mean=prompt), output_tokens=LengthDistribution(mean=output),
                        rate=rate)
    loaded = parse_deployment(dump_deployment(replace_cluster()), "x.yaml")
    return make_plan(cost_model(loaded, CALIBRATION), PlanInputs(workload, SLO_HERE, rate=rate, kv_mode="pull"))


def replace_cluster():
    """Any local-cpu deployment: only its cluster and model matter to cost_model."""
    from ascend_pd.deploy.io import load_deployment

    root = Path(__file__).resolve().parents[3]
    return load_deployment(root / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml").deployment


def running(prompt: int, output: int, rate: float):
    """The deployment `ascend-pd plan` makes for this traffic, as if it were running."""
    deployment = planned(prompt, output, rate).deployment
    return parse_deployment(dump_deployment(deployment), "deployment.yaml")


def window(prompt: float, output: float, rate: float, ttft=None, tpot=None, streamed: int = 0) -> dict:
    def spread(value):
        return None if value is None else {"mean": value, "p50": value, "p90": value, "p99": value}
    return {"window_seconds": 60, "observed_seconds": 60, "requests": int(rate * 60), "finished": int(rate * 60),
            "failed": 0, "rate_rps": rate, "prompt_tokens": spread(prompt), "output_tokens": spread(output),
            "ttft_seconds": spread(ttft), "tpot_seconds": spread(tpot), "streamed": streamed}


def test_a_shift_to_long_prompts_flips_a_decode_to_prefill_as_plan_would():
    loaded = running(64, 128, 5.0)  # 1 P + 2 D
    proposal = replan(loaded, parse_observed(window(512, 16, 2.5), "w"), CALIBRATION)
    assert proposal.change and [s.action for s in proposal.steps] == ["flip"]
    assert counts_of(proposal.deployment) == counts_of(planned(512, 16, 2.5 * 1.2).deployment)
    flipped = proposal.steps[0]
    old = next(i for i in loaded.deployment.instances if i.name == flipped.replaces)
    new = next(i for i in proposal.deployment.instances if i.name == flipped.instance)
    assert (old.role, new.role) == ("decode", "prefill") and old.devices == new.devices
    assert new.vllm.max_num_batched_tokens >= 512  # prefill's engine arguments, not decode's


def test_the_changed_deployment_validates_and_keeps_the_running_instances_as_they_are():
    loaded = running(64, 128, 5.0)
    proposal = replan(loaded, parse_observed(window(64, 128, 7.0), "w"), CALIBRATION)  # more decode
    assert proposal.change and [s.action for s in proposal.steps] == ["start"]
    after = parse_deployment(dump_deployment(proposal.deployment), "after.yaml")
    assert [d for d in validate(after) if d.severity == "error"] == []
    for kept in loaded.deployment.instances:
        assert kept in proposal.deployment.instances  # same devices, ports and names
    started = proposal.deployment.instances[-1]
    used = {(p.node, d) for i in loaded.deployment.instances for p in i.devices for d in p.devices}
    assert started.name == "decode-2" and not {(p.node, d) for p in started.devices for d in p.devices} & used


def test_load_that_the_deployment_already_fits_changes_nothing():
    loaded = running(64, 128, 5.0)
    for rate in (4.0, 4.5, 4.8):  # up to the planned 5 req/s less the headroom it keeps
        proposal = replan(loaded, parse_observed(window(64, 128, rate), "w"), CALIBRATION)
        assert not proposal.change and proposal.steps == [], proposal.reasons


def test_shrinking_waits_for_the_margin_then_moves_to_colocated_serving():
    loaded = running(512, 16, 4.8)  # 3 P + 1 D
    near = replan(loaded, parse_observed(window(512, 16, 1.4), "w"), CALIBRATION)
    assert not near.change  # 2 colocated would carry 1.4 req/s with headroom, not with the shrink margin too
    far = replan(loaded, parse_observed(window(512, 16, 1.0), "w"), CALIBRATION)
    assert far.change and far.target.devices < far.current.devices
    assert counts_of(far.deployment) == Counter({("colocated", ONE): 2})
    # colocated instances come up while P and D still serve; P and D stop last, when colocated can take the load
    assert [s.action for s in far.steps] == ["flip", "flip", "stop", "stop"]
    assert min(c["rate_rps"] for c in far.capacity) >= 1.0


def test_an_order_that_serves_less_than_the_load_is_caught():
    from ascend_pd.planner.replan import _capacity_during, _unsafe
    from ascend_pd.planner.resize import Step

    deployment = running(512, 16, 2.4).deployment  # 2 P + 1 D
    rates = {("prefill", ONE): 1.7, ("decode", ONE): 19.0, ("colocated", ONE): 1.4}
    without_decode = deployment.model_copy(update={"instances": [i for i in deployment.instances
                                                                 if i.role == "prefill"]})
    steps = [Step("stop", "decode-0", "decode")]
    trail = _capacity_during(steps, deployment, without_decode, rates)
    assert trail[0]["before_rps"] == pytest.approx(3.4) and trail[0]["rate_rps"] == 0
    assert _unsafe(trail, load=2.0) is trail[0]
    fewer_prefill = deployment.model_copy(update={"instances": deployment.instances[1:]})
    trail = _capacity_during([Step("stop", "prefill-0", "prefill")], deployment, fewer_prefill, rates)
    assert _unsafe(trail, load=1.5) is None and _unsafe(trail, load=2.0) is trail[0]


def slow_engines_window(loaded, prefill_scale: float, decode_scale: float, rate: float) -> dict:
    """A window of chat traffic whose median TTFT and TPOT are the model's with engines this much slower."""
    slow = replace(cost_model(loaded, CALIBRATION), prefill_scale=prefill_scale, decode_scale=decode_scale)
    workload = Workload(input_tokens=LengthDistribution(mean=64), output_tokens=LengthDistribution(mean=128),
                        rate=rate * 1.2)
    req = requirements(slow, PlanInputs(workload, SLO_HERE, rate=rate * 1.2, kv_mode="pull"))
    truth = predict(slow, deployed_choice(loaded.deployment), 1, req, 4, rate)
    return window(64, 128, rate, ttft=truth["ttft_ms"]["p50"] / 1e3, tpot=truth["tpot_ms"] / 1e3, streamed=100)


def test_the_correction_recovers_how_much_slower_the_engines_are_than_the_model():
    loaded = running(64, 128, 5.0)
    seen = slow_engines_window(loaded, prefill_scale=1.6, decode_scale=2.0, rate=2.0)  # within what slow engines carry
    correction = replan(loaded, parse_observed(seen, "w"), CALIBRATION).correction
    assert correction.decode_scale == pytest.approx(2.0, rel=0.1)
    assert correction.prefill_scale == pytest.approx(1.6, rel=0.25)


def test_a_window_too_quiet_for_latencies_keeps_the_earlier_windows_correction():
    loaded = running(64, 128, 5.0)
    measured = replan(loaded, parse_observed(slow_engines_window(loaded, 1.3, 1.5, rate=3.0), "w"),
                      CALIBRATION).correction
    assert measured.measured and measured.decode_scale == pytest.approx(1.5, rel=0.1)
    quiet = parse_observed(window(64, 128, 3.0, streamed=3), "w")
    assert quiet.ttft is None and quiet.tpot is None
    kept = replan(loaded, quiet, CALIBRATION, prior=measured).correction
    assert (kept.prefill_scale, kept.decode_scale, kept.measured) == (measured.prefill_scale, measured.decode_scale,
                                                                      True)
    assert replan(loaded, quiet, CALIBRATION).correction.decode_scale == 1.0  # no earlier window: as calibrated


def test_resize_refuses_a_start_the_cluster_has_no_devices_for():
    loaded = running(512, 16, 4.8)  # 4 of 4 devices
    deployment = loaded.deployment
    with pytest.raises(InputError, match="no 1 free devices"):
        resize(deployment, loaded.cluster(), counts_of(deployment) + Counter({("decode", ONE): 1}),
               {("decode", ONE): deployment.instances[-1].vllm})


def test_observed_windows_that_cannot_be_fitted_name_the_field():
    with pytest.raises(InputError) as missing:
        parse_observed({"window_seconds": 60}, "w.json")
    assert missing.value.field == "rate_rps"
    idle = window(64, 128, 1.0)
    idle["finished"] = idle["failed"] = 3
    with pytest.raises(InputError, match="no traffic was served"):
        parse_observed(idle, "w.json")
    bad = window(64, 128, 1.0)
    bad["prompt_tokens"] = {"mean": -1, "p50": 1, "p90": 1, "p99": 1}
    with pytest.raises(InputError) as negative:
        parse_observed(bad, "w.json")
    assert negative.value.field == "prompt_tokens"


def test_observed_lengths_are_fitted_with_their_spread():
    spread = parse_observed(window(64, 128, 1.0), "w") .workload()
    assert spread.input_tokens.distribution == "fixed"
    doc = window(64, 128, 1.0)
    doc["prompt_tokens"] = {"mean": 1000, "p50": 700, "p90": 2000, "p99": 4000}
    fitted = parse_observed(doc, "w").workload()
    assert fitted.input_tokens.distribution == "lognormal" and fitted.input_tokens.p99 == 4000
