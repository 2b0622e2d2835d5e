"""Bad input to `ascend-pd validate` gives one clear message naming file, line and fix, exit 2, no traceback.

The commands run in this process (tests/cli_runner.py); the console script's own process is run where it is what
is checked: its exit code and stderr on bad input, and shell completion, which it reads from its environment."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import run_cli as run
from tests.known_shapes import known_shape

EXAMPLE = known_shape("atlas-800i-a2-x4-qwen3-32b")  # the edits below name its lines


def run_entry_point(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", *args], capture_output=True, text=True,
                          env=env)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(text)
    return path


def assert_clean_failure(result, *needles):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert "fix:" in result.stderr


def test_missing_file(tmp_path):
    """In the console script's own process: the exit code and stderr a user sees."""
    missing = tmp_path / "nope.yaml"
    assert_clean_failure(run_entry_point("validate", str(missing)), str(missing), "not found")


def test_malformed_yaml_names_the_line(tmp_path):
    text = EXAMPLE.read_text().replace("cluster: atlas-800i-a2-x4", "cluster: [atlas-800i-a2-x4")
    line = next(i for i, l in enumerate(text.splitlines(), 1) if l.startswith("cluster:"))
    result = run("validate", str(write(tmp_path, text)))
    assert_clean_failure(result, "malformed YAML")
    assert f"deployment.yaml:{line}" in result.stderr or f"deployment.yaml:{line + 1}" in result.stderr


def test_wrong_type_names_field_and_line(tmp_path):
    text = EXAMPLE.read_text().replace("kv_port: 28000", "kv_port: lots", 1)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "kv_port: lots" in l)
    result = run("validate", str(write(tmp_path, text)))
    assert_clean_failure(result, f"deployment.yaml:{line}", "instances[0].kv_port", "whole number")


def test_unknown_key_is_rejected_with_its_name(tmp_path):
    text = EXAMPLE.read_text().replace("  role: prefill\n", "  role: prefill\n  rol: decode\n", 1)
    result = run("validate", str(write(tmp_path, text)))
    assert_clean_failure(result, "instances[0].rol", "remove this key")


def test_bad_literal_lists_the_choices(tmp_path):
    text = EXAMPLE.read_text().replace("mode: pull", "mode: pool")
    assert_clean_failure(run("validate", str(write(tmp_path, text))), "connector.mode", "'pull'")


def test_unknown_cluster_in_deployment(tmp_path):
    text = EXAMPLE.read_text().replace("cluster: atlas-800i-a2-x4", "cluster: atlas-900")
    assert_clean_failure(run("validate", str(write(tmp_path, text))), "atlas-900", "cloudmatrix384")


def test_empty_file(tmp_path):
    assert_clean_failure(run("validate", str(write(tmp_path, ""))), "empty file")


def test_binary_garbage(tmp_path):
    path = tmp_path / "deployment.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert_clean_failure(run("validate", str(path)), "UTF-8")


def test_json_format_reports_input_errors_as_json(tmp_path):
    import json
    result = run("validate", "--format", "json", str(write(tmp_path, "kind: Deployment\n")))
    assert result.returncode == 2
    payload = json.loads(result.stdout)
    assert payload["valid"] is False and payload["input_error"]["fix"]


def test_json_format_lists_diagnostics(tmp_path):
    import json
    text = EXAMPLE.read_text().replace("http_port: 8010", "http_port: 8000", 1)
    result = run("validate", "--format", "json", str(write(tmp_path, text)))
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["valid"] is False
    clash = [d for d in payload["diagnostics"] if d["code"] == "APD501"]
    assert clash and clash[0]["line"] and clash[0]["hint"] and clash[0]["path"].startswith("instances[")


@pytest.mark.parametrize("command", [["clusters"], ["models"], ["show", "cluster", "atlas-800i-a2-x4"],
                                     ["validate", "--list-rules"]])
def test_catalog_commands_run(command):
    result = run(*command)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_show_unknown_cluster_exits_2():
    assert_clean_failure(run("show", "cluster", "nowhere"), "nowhere")


def test_every_command_has_help():
    from ascend_pd.cli.main import COMMANDS
    for name in COMMANDS:
        result = run(name, "--help")
        assert result.returncode == 0 and "Usage" in result.stdout, name


def test_shell_completion_lists_commands():
    import os
    env = dict(os.environ, _ASCEND_PD_COMPLETE="bash_complete", COMP_WORDS="ascend-pd val", COMP_CWORD="1")
    result = run_entry_point(env=env)
    assert "validate" in result.stdout


def test_a_copy_command_with_an_unknown_placeholder_is_refused_before_the_loop_starts(tmp_path):
    result = run("autoscale", "--deployment", str(EXAMPLE), "--proxy", "http://127.0.0.1:9", "--admin-token", "t",
                 "--copy-command", "rsync -a {bundle}/ {hots}:{bundle}/")
    assert_clean_failure(result, "--copy-command", "hots", "{bundle}, {host}, {node}")


@pytest.mark.parametrize("flags, needles", [
    (["--min-instances", "decode:2"], ["--min-instances", "'decode:2' is not ROLE=COUNT", "decode=4"]),
    (["--max-instances", "router=2"], ["--max-instances", "roles: prefill, decode, colocated"]),
    (["--min-instances", "decode=3", "--max-instances", "decode=2"], ["at most 2 decode instances, but at least 3"]),
    (["--min-instances", "prefill=0"], ["--min-instances", "nothing to wake", "prefill=1 or more"]),
])
def test_autoscale_bounds_that_cannot_be_met_are_refused_before_the_loop_starts(flags, needles):
    result = run("autoscale", "--deployment", str(EXAMPLE), "--admin-token", "t", *flags)
    assert_clean_failure(result, *needles)
