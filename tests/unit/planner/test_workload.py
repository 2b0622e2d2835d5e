"""Workload samples match the distribution asked for; traces are read line by line with clear errors."""

import numpy as np
import pytest

from ascend_pd.deploy.schema import LengthDistribution, Workload
from ascend_pd.errors import InputError
from ascend_pd.planner.workload import load_trace, sample_lengths, samples


def test_lognormal_from_mean_and_p99_has_that_mean_and_p99():
    dist = LengthDistribution(mean=3500, p99=16000, distribution="lognormal")
    values = sample_lengths(dist, 200_000, np.random.default_rng(1), "input_tokens")
    assert values.mean() == pytest.approx(3500, rel=0.02)
    assert np.percentile(values, 99) == pytest.approx(16000, rel=0.03)


def test_normal_lengths_stay_within_min_and_max():
    dist = LengthDistribution(mean=100, std=80, distribution="normal", min=20, max=150)
    values = sample_lengths(dist, 10_000, np.random.default_rng(2), "output_tokens")
    assert values.min() >= 20 and values.max() <= 150


def test_a_p99_below_the_mean_is_refused_with_a_fix():
    dist = LengthDistribution(mean=3500, p99=1000, distribution="lognormal")
    with pytest.raises(InputError) as err:
        sample_lengths(dist, 10, np.random.default_rng(0), "workload.input_tokens")
    assert err.value.field == "workload.input_tokens" and "p99" in err.value.fix


def test_decode_context_is_the_context_held_at_an_average_decode_step():
    from ascend_pd.planner.workload import LengthSamples

    inputs, outputs = [1000, 1000, 200, 5000], [100, 300, 1, 40]
    # Walk every decode step of every sequence: at its k-th output token a sequence holds its prompt and the k
    # tokens generated so far. A sequence with a long output is in more steps, so it weighs more.
    held = [i + k for i, o in zip(inputs, outputs) for k in range(1, o + 1)]
    lengths = LengthSamples(np.array(inputs, dtype=float), np.array(outputs, dtype=float))
    assert lengths.mean_decode_context() == pytest.approx(sum(held) / len(held), abs=1)  # within one token
    per_sequence = np.mean([i + o / 2 for i, o in zip(inputs, outputs)])  # what forgetting the weights gives
    assert abs(lengths.mean_decode_context() - per_sequence) > 100


def test_trace_lengths_are_resampled_from_the_trace(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"input_tokens": 100, "output_tokens": 7}\n\n{"input_tokens": 300, "output_tokens": 9}\n')
    drawn = samples(Workload(input_tokens=LengthDistribution(mean=1), output_tokens=LengthDistribution(mean=1),
                             rate=1, trace=str(trace)), 500)
    assert set(drawn.input_tokens) == {100, 300} and set(drawn.output_tokens) == {7, 9}


def test_a_bad_trace_line_names_its_line_number(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"input_tokens": 100, "output_tokens": 7}\n{"input_tokens": -3, "output_tokens": 9}\n')
    with pytest.raises(InputError) as err:
        load_trace(trace)
    assert err.value.line == 2 and err.value.file == str(trace)
