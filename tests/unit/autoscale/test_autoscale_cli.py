"""`ascend-pd autoscale` as an operator runs it on a rendered bundle: it observes, decides, logs and exits after
--intervals, whether it observes a saved window or the replicas the deployment names (none answer here)."""

import json
import subprocess

from tests.cli_runner import run_cli

from .bundles import example_bundle, saved_window


def autoscale(*args: str) -> subprocess.CompletedProcess:
    return run_cli("autoscale", *args)


def decisions(log) -> list[dict]:
    return [line for line in map(json.loads, log.read_text().splitlines()) if line["phase"] == "decision"]


def test_a_saved_window_is_observed_and_decided_on_for_the_given_intervals(tmp_path):
    deployment = example_bundle(tmp_path, "bash")
    saved = saved_window(tmp_path)
    done = autoscale("--deployment", str(deployment), "--proxy", str(saved), "--intervals", "2", "--interval", "0.1",
                     "--dry-run")
    assert done.returncode == 0, done.stderr
    made = decisions(deployment.parent / "autoscale.jsonl")
    assert len(made) == 2 and all(d["decision"] in ("hold", "wait") for d in made), made
    assert all(d["observed_rate_rps"] == 2.0 for d in made)


def test_without_proxy_it_asks_every_replica_the_deployment_names_and_says_which_did_not_answer(tmp_path):
    deployment = example_bundle(tmp_path, "bash")
    done = autoscale("--deployment", str(deployment), "--admin-token", "t", "--intervals", "1", "--dry-run")
    assert done.returncode == 0, done.stderr
    (made,) = decisions(deployment.parent / "autoscale.jsonl")
    assert made["decision"] == "unobservable"
    assert "http://127.0.0.1:8080" in made["error"], made  # proxy.node of the local-cpu example, at proxy.port
