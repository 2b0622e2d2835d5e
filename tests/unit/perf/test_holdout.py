"""The cost model judged on published rows it was not fitted to (measurements.yaml, `use: holdout`): decode TPOT at
other batch sizes and lengths on the CloudMatrix stack, and other datasets, concurrencies and deployments on
vllm-ascend. The tolerances are the targets the profiles are held to (docs/planner.md lists every row)."""

import pytest

from ascend_pd.perf.published import holdout_errors, mean_abs, profile_rows


def test_cloudmatrix_decode_tpot_from_batch_8_to_128_per_package_is_within_15_percent_on_average():
    held = holdout_errors("cloudmatrix-infer")
    batches = sorted(row.batch_per_rank * 2 for row, _, _ in held)  # per package: two devices
    assert batches[0] <= 8 and batches[-1] >= 128
    assert mean_abs([err for _, _, err in held]) <= 0.15
    assert all(abs(err) <= 0.30 for _, _, err in held)


def test_vllm_ascend_tpot_is_within_25_percent_on_average_of_held_out_measurements():
    held = holdout_errors("vllm-ascend")
    assert len(held) >= 5
    assert mean_abs([err for _, _, err in held]) <= 0.25


@pytest.mark.parametrize("profile", ["cloudmatrix-infer", "vllm-ascend"])
def test_no_row_is_both_fitted_and_held_out(profile):
    rows = profile_rows(profile)
    assert not {r.label for r in rows.fit} & {r.label for r in rows.holdout}
    assert rows.holdout

