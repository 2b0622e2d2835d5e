"""Guards of the fit: the cloudmatrix-infer profile reproduces the two published CloudMatrix384 figures it was fitted
to, and refitting reproduces the stored values. These re-check fitted figures, so they catch a broken fit or a changed model,
not a wrong one: tests/unit/perf/test_holdout.py judges the model on rows it was not fitted to."""

import json

import pytest
from click.testing import CliRunner

from ascend_pd.cli.main import cli

PUBLISHED_PREFILL_TOKENS_PER_S_PER_PACKAGE = 5655
PUBLISHED_DECODE_TOKENS_PER_S_PER_PACKAGE = 1943
PUBLISHED_DECODE_TPOT_MS = 49.4


def estimate(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["estimate", "--model", "deepseek-r1", "--chip", "910c", "--quant", "w8a8",
                                      "--calibration", "cloudmatrix-infer", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_fit_guard_prefill_anchor_4k_prompts_16k_tokens_per_package_ep32():
    # 16,384 tokens per package = 8,192 per die; one prefill instance of 32 dies with EP32.
    out = estimate("--role", "prefill", "--tp", "1", "--dp", "32", "--ep", "32", "--context", "4096",
                   "--batch-tokens", "8192")
    assert out["tokens_per_s_per_package"] == pytest.approx(PUBLISHED_PREFILL_TOKENS_PER_S_PER_PACKAGE, rel=0.10)
    assert out["fits"]


def test_fit_guard_decode_anchor_batch_96_per_package_ep320_with_mtp():
    # 48 sequences per die, 4K prompt + 256 output: the batch reads on average 4096 + 128 tokens.
    out = estimate("--role", "decode", "--tp", "1", "--dp", "320", "--ep", "320", "--batch-per-device", "48",
                   "--context", str(4096 + 128), "--mtp", "1", "--mtp-acceptance", "0.7")
    assert out["tpot_ms"] == pytest.approx(PUBLISHED_DECODE_TPOT_MS, rel=0.10)
    assert out["tokens_per_s_per_package"] == pytest.approx(PUBLISHED_DECODE_TOKENS_PER_S_PER_PACKAGE, rel=0.10)
    assert out["fits"]


def test_decode_throughput_obeys_littles_law():
    out = estimate("--role", "decode", "--tp", "1", "--dp", "320", "--ep", "320", "--batch-per-device", "48",
                   "--context", "4224", "--mtp", "1", "--mtp-acceptance", "0.7")
    # 96 sequences per package each emit one token every TPOT.
    assert out["tokens_per_s_per_package"] == pytest.approx(96 / (out["tpot_ms"] / 1e3), rel=1e-6)


def test_mla_kv_bytes_per_token_is_latent_plus_rope_over_61_layers_in_bf16():
    out = estimate("--role", "decode", "--context", "1024", "--dp", "16", "--ep", "16")
    assert out["kv_bytes_per_token"] == (512 + 64) * 61 * 2


@pytest.mark.xdist_group("refit")  # with the other tests that read the refit (test_accuracy_gate.py)
@pytest.mark.parametrize("profile", ["cloudmatrix-infer", "vllm-ascend"])
def test_fit_guard_refit_reproduces_the_stored_values(profile):
    import yaml

    from ascend_pd.perf.calibration import CALIBRATION_FILE
    from ascend_pd.perf.published import refit

    result = refit(profile, by_source=True)  # the refit the validation tests share
    stored = yaml.safe_load(CALIBRATION_FILE.read_text())["profiles"][profile]["default"]  # with `name@era` values
    for name, value in result.values.items():
        assert value == pytest.approx(stored[name], rel=5e-3, abs=1e-9), name


def test_estimate_json_carries_the_documented_keys():
    prefill = estimate("--role", "prefill", "--tp", "16", "--context", "4096")
    decode = estimate("--role", "decode", "--dp", "32", "--ep", "32", "--batch-per-device", "8", "--context", "4096")
    common = {"step_ms", "tokens_per_s_per_device", "tokens_per_s_per_package", "kv_bytes_per_token",
              "memory_per_device_bytes", "fits", "breakdown"}
    assert common | {"ttft_ms"} <= set(prefill)
    assert common | {"tpot_ms"} <= set(decode)
    # one 4K prompt per TP16 rank: TTFT is the step and the server's request path, and 16 devices share its tokens
    assert prefill["ttft_ms"] == pytest.approx(prefill["step_ms"] + prefill["request_overhead_ms"])
    assert prefill["tokens_per_s_per_device"] == pytest.approx(4096 / (prefill["step_ms"] / 1e3) / 16)


def test_a_model_too_big_for_its_shape_does_not_fit():
    out = estimate("--role", "decode", "--tp", "1", "--context", "4096")  # 671B on one 64 GB die
    assert out["fits"] is False


def test_the_ttft_a_client_sees_holds_the_request_path_and_a_burst_queues():
    """Under the vllm-ascend profile, whose request path is fitted: a client's TTFT is the prefill step and that
    path; prompts arriving together wait for the steps before theirs."""
    def prefill(*args):
        result = CliRunner().invoke(cli, ["estimate", "--model", "qwen3-32b", "--chip", "910b3", "--role", "prefill",
                                          "--tp", "4", "--context", "2048", "--format", "json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    alone = prefill()
    assert alone["request_overhead_ms"] > 0
    assert alone["ttft_ms"] == pytest.approx(alone["step_ms"] + alone["request_overhead_ms"])
    one = prefill("--burst", "1")
    assert one["burst_ttft_ms"] == pytest.approx(alone["ttft_ms"], rel=1e-6)  # one prompt: one step, no wait
    # 16 prompts of 2K, 4K tokens a step (1K per device): two prompts a step, eight steps; the mean waits 4.5 steps
    burst = prefill("--burst", "16", "--batch-tokens", "1024")
    assert burst["burst_step_tokens"] == 4096
    steps = burst["burst_ttft_ms"] - alone["request_overhead_ms"]
    two_prompts = prefill("--batch-tokens", "1024")["step_ms"]  # a step of two 2K prompts
    assert steps == pytest.approx(4.5 * two_prompts, rel=1e-6)


def test_estimate_prices_the_release_it_is_given():
    def decode(*args):
        return CliRunner().invoke(cli, ["estimate", "--model", "qwen3-32b", "--chip", "910b3", "--role", "decode",
                                        "--tp", "4", "--context", "2048", "--batch-per-device", "2", "--format",
                                        "json", *args])

    pinned, old = (json.loads(decode(*args).output) for args in ((), ("--vllm-ascend-version", "v0.13.0")))
    # vLLM schedules ahead of the device by default from 0.14: the older release waits for each step's scheduling
    assert (pinned["execution_mode"], old["execution_mode"]) == ("full + async", "full")
    assert old["tpot_ms"] > pinned["tpot_ms"]
    bad = decode("--vllm-ascend-version", "newest")
    assert bad.exit_code == 2 and "--vllm-ascend-version" in bad.output and "Traceback" not in bad.output
