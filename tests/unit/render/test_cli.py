"""render, ranktable and preflight on the command line: output on success, exit 1 with diagnostics when the
deployment has errors, exit 2 with file, field and fix (never a traceback) on bad input."""

import json
import os

import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli

from .conftest import EXAMPLES, example_data, known_shape


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_render_writes_every_target_and_executable_scripts(tmp_path):
    out = tmp_path / "out"
    result = invoke("render", str(known_shape("atlas-800i-a2-x4-qwen3-32b")), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert os.access(out / "launch-a2-00.sh", os.X_OK) and os.access(out / "stop-a2-03.sh", os.X_OK)
    assert (out / "k8s" / "decode-1.yaml").is_file() and (out / "ranktables" / "prefill-3.json").is_file()
    assert "launch-a2-02.sh" in (out / "README.md").read_text()


def test_render_target_bash_writes_no_manifests_and_k8s_no_launchers(tmp_path):
    example = str(EXAMPLES / "local-cpu-tiny-gqa.yaml")
    assert invoke("render", example, "--out", str(tmp_path / "b"), "--target", "bash").exit_code == 0
    assert invoke("render", example, "--out", str(tmp_path / "k"), "--target", "k8s").exit_code == 0
    assert not (tmp_path / "b" / "k8s").exists() and (tmp_path / "b" / "launch-proxy.sh").exists()
    assert (tmp_path / "k" / "k8s" / "proxy.yaml").exists() and not list((tmp_path / "k").glob("*.sh"))


def test_render_refuses_a_deployment_with_errors_and_writes_nothing(tmp_path):
    data = example_data("local-cpu-tiny-gqa")
    data["instances"][1]["devices"] = data["instances"][0]["devices"]  # both instances on CPU rank 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = invoke("render", str(bad), "--out", str(tmp_path / "out"))
    assert result.exit_code == 1
    assert "APD104" in result.output and "not rendered" in result.output
    assert not (tmp_path / "out").exists()


def test_render_of_unreadable_yaml_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("metadata: {name: x\n")
    result = invoke("render", str(bad), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "Traceback" not in result.output and "broken.yaml" in result.output


def test_render_rejects_a_malformed_node_ip(tmp_path):
    result = invoke("render", str(EXAMPLES / "local-cpu-tiny-gqa.yaml"), "--out", str(tmp_path), "--node-ip", "x")
    assert result.exit_code == 2 and "--node-ip" in result.output and "fix:" in result.output


def test_ranktable_prints_one_table_per_instance():
    result = invoke("ranktable", str(known_shape("cloudmatrix384-deepseek-r1")))
    assert result.exit_code == 0
    assert sorted(json.loads(result.output)) == ["decode-0", "prefill-0", "prefill-1"]


def test_ranktable_writes_files_for_one_instance(tmp_path):
    result = invoke("ranktable", str(known_shape("atlas-800i-a2-x4-qwen3-32b")), "--instance", "decode-1",
                    "--out", str(tmp_path))
    assert result.exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["decode-1.json"]


def test_ranktable_input_errors_exit_2():
    unknown = invoke("ranktable", str(known_shape("atlas-800i-a2-x4-qwen3-32b")), "--instance", "nope")
    assert unknown.exit_code == 2 and "prefill-0" in unknown.output
    cpu = invoke("ranktable", str(EXAMPLES / "local-cpu-tiny-gqa.yaml"))
    assert cpu.exit_code == 2 and "device IPs" in cpu.output and "Traceback" not in cpu.output


def test_preflight_with_an_unknown_node_exits_2():
    result = invoke("preflight", "--deployment", str(EXAMPLES / "local-cpu-tiny-gqa.yaml"), "--node", "n9")
    assert result.exit_code == 2 and "node 'n9' is not in cluster" in result.output
