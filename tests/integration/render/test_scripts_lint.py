"""Every shell script render writes (launchers, stop scripts, the proxy launcher, the pods' serve scripts) parses
with `bash -n` and passes shellcheck with no warnings."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ascend_pd.deploy import load_deployment
from ascend_pd.hardware import configs_dir
from ascend_pd.render import render_bundle, write_bundle

pytestmark = pytest.mark.integration

# every shipped example, and a deployment with a DP rank spread over nodes (headless parts)
EXAMPLES = sorted((configs_dir() / "deployments").glob("*.yaml")) + [
    Path(__file__).resolve().parents[2] / "unit" / "render" / "spread-tp-qwen3.yaml"]


def rendered_scripts(example, tmp_path):
    files = render_bundle(load_deployment(example)).files
    write_bundle(files, tmp_path)
    for document in yaml.safe_load_all(files["k8s/configmap.yaml"]):
        for key, text in document["data"].items():
            if key.endswith(".sh"):
                (tmp_path / "k8s" / key).write_text(text)
    return sorted(tmp_path.rglob("*.sh"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_generated_scripts_pass_bash_n_and_shellcheck(example, tmp_path):
    assert shutil.which("shellcheck"), "shellcheck is missing: apt-get install -y shellcheck"
    scripts = rendered_scripts(example, tmp_path)
    assert any(s.name.startswith("serve-") for s in scripts) and any(s.name.startswith("stop-") for s in scripts)
    for script in scripts:
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{script.name}: {syntax.stderr}"
    lint = subprocess.run(["shellcheck", "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout


def test_shellcheck_does_flag_a_bad_script(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $DIR/*\n")
    assert subprocess.run(["shellcheck", str(bad)], capture_output=True).returncode != 0
