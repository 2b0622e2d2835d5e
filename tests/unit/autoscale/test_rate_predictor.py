"""The load predictors' behaviour on made-up windows (steady noise, a ramp, a spike, idle), their refusals, and a guard
that the smoothed-trend predictor still beats the last-window rule on the shipped traces it was tuned on."""

import math
from pathlib import Path

import numpy as np
import pytest

from ascend_pd.autoscale.predictor import PREDICTORS, LastWindowTimes, SmoothedTrend, make_predictor
from ascend_pd.autoscale.rate_replay import beats, read_arrival_trace, replay, score, window_rates
from ascend_pd.errors import InputError

ROOT = Path(__file__).resolve().parents[3]
SHIPPED_TRACES = sorted((ROOT / "tools" / "data" / "arrival_traces").glob("*.csv"))
WINDOW = 60.0


def fed(predictor, rates):
    """The design rate after each window."""
    designs = []
    for i, rate in enumerate(rates):
        predictor.update((i + 1) * WINDOW, rate)
        designs.append(predictor.design_rate())
    return designs


@pytest.mark.parametrize("name", PREDICTORS)
def test_before_any_window_the_design_rate_is_zero(name):
    assert make_predictor(name).design_rate() == 0.0


def test_the_last_window_rule_sizes_for_the_last_rate_times_its_factor():
    assert fed(LastWindowTimes(), [5.0, 2.0])[-1] == pytest.approx(2.4)
    assert fed(LastWindowTimes(1.5), [4.0])[-1] == pytest.approx(6.0)


@pytest.mark.parametrize("seed", range(5))
def test_steady_noisy_load_is_sized_in_a_band_just_above_its_mean(seed):
    mean = 5.0
    rates = np.random.default_rng(seed).poisson(mean * WINDOW, 80) / WINDOW  # Poisson arrivals, 60 s windows
    designs = np.array(fed(SmoothedTrend(), list(rates))[20:]) / mean  # after 20 windows of warm-up
    rule = np.array(fed(LastWindowTimes(), list(rates))[20:]) / mean
    assert 1.03 < designs.mean() < 1.18  # some margin, and less than the rule's 20 %
    assert designs.mean() < rule.mean()
    assert designs.min() > 0.95 and designs.max() < 1.3


@pytest.mark.parametrize("seed", range(5))
def test_a_steady_ramp_is_sized_ahead_of_the_last_window_rule(seed):
    expected = [2.0 + 0.5 * i for i in range(17)]  # 2 -> 10 req/s, +0.5 a window
    rates = list(np.random.default_rng(seed).poisson(np.array(expected[:-1]) * WINDOW) / WINDOW)
    ours = fed(SmoothedTrend(), rates)[-1]
    assert ours > fed(LastWindowTimes(), rates)[-1]  # the last window's rate x 1.2
    assert ours > expected[-1]  # above the rate the next window brings on the ramp


def test_perfectly_constant_load_is_still_sized_a_little_above_it():
    assert fed(SmoothedTrend(), [4.0] * 40)[-1] == pytest.approx(4.0 * 1.05)


def test_one_spike_window_moves_the_design_rate_only_part_way():
    predictor = SmoothedTrend()
    before = fed(predictor, [10.0] * 20)[-1]
    after = fed(predictor, [30.0])[-1]
    assert after < 30.0 * 1.2  # where the last-window rule would jump
    assert after < 2 * before  # the deployment does not double for one window
    assert after > before  # but the spike is not ignored


def test_idle_windows_take_the_design_rate_down_toward_zero():
    predictor = SmoothedTrend()
    steady = fed(predictor, [10.0] * 20)[-1]
    idle = fed(predictor, [0.0] * 12)
    assert all(later < earlier for earlier, later in zip([steady] + idle, idle))
    assert idle[-1] < 0.01 * steady


def test_an_unknown_predictor_name_is_an_input_error_naming_the_field():
    with pytest.raises(InputError) as raised:
        make_predictor("crystal-ball")
    assert raised.value.field == "predictor"
    assert "last-window" in raised.value.fix


@pytest.mark.parametrize("rate", [-1.0, math.nan, math.inf, "fast"])
@pytest.mark.parametrize("name", PREDICTORS)
def test_a_rate_that_is_not_one_is_refused(name, rate):
    with pytest.raises(InputError) as raised:
        make_predictor(name).update(60.0, rate)
    assert raised.value.field == "rate"


def test_a_window_that_cuts_a_bucket_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("# made up\nstart_s,arrivals\n0,3\n10,4\n20,5\n")
    assert window_rates(read_arrival_trace(trace), 20.0) == [0.35]  # the partial last window is cut
    with pytest.raises(InputError) as raised:
        window_rates(read_arrival_trace(trace), 15.0)
    assert raised.value.field == "window"


@pytest.mark.parametrize("path", SHIPPED_TRACES, ids=lambda p: p.stem)
def test_guards_tuning_on_the_shipped_traces_smoothed_trend_beats_the_last_window_rule(path):
    """Its constants were chosen looking at these traces (the first halves), so this guards the tuning, not the
    predictor's worth on other load."""
    rates = window_rates(read_arrival_trace(path), WINDOW)
    ours = score(replay(make_predictor("smoothed-trend"), rates, WINDOW))
    rule = score(replay(make_predictor("last-window"), rates, WINDOW))
    assert beats(ours, rule), (ours, rule)


def test_there_are_shipped_traces_to_guard():
    assert len(SHIPPED_TRACES) >= 2
