"""The deployment's secrets in a rendered bundle: made private on the first render, kept by the next, never among the
rendered files (so never printed, diffed or logged), carried by a Secret that every pod mounts read-only, and found
by every launched process through a file, never a command line."""

import base64
import json
import os
import stat
import subprocess
import time

import kubernetes_validate
from kubernetes_validate.utils import latest_version
import pytest
import yaml
from click.testing import CliRunner

from ascend_pd.cli.main import cli
from ascend_pd.deploy import load_deployment
from ascend_pd.deploy.secrets import (ADMIN_TOKEN, ADMIN_TOKEN_FILE_ENV, K8S_SECRET_MODE, K8S_SECRET_MOUNT, KV_SECRET,
                                      KV_SECRET_ENV, MIN_SECRET_CHARS)
from ascend_pd.errors import InputError
from ascend_pd.render import RenderOptions, render_bundle, write_bundle

from .conftest import EXAMPLE_NAMES, EXAMPLES, bundle_of

K8S_VERSION = latest_version()


def rendered(tmp_path, name="local-cpu-tiny-gqa", target="all"):
    result = render_bundle(load_deployment(EXAMPLES / f"{name}.yaml"), RenderOptions(target=target))
    write_bundle(result.files, tmp_path, result.k8s_deployment)
    return result


def secrets_in(bundle) -> tuple[str, str]:
    return (bundle / KV_SECRET).read_text().strip(), (bundle / ADMIN_TOKEN).read_text().strip()


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_first_render_makes_both_secrets_readable_by_the_owner_only(tmp_path):
    rendered(tmp_path)
    kv, token = secrets_in(tmp_path)
    assert len(kv) >= MIN_SECRET_CHARS and len(token) >= MIN_SECRET_CHARS and kv != token
    assert mode(tmp_path / KV_SECRET) == mode(tmp_path / ADMIN_TOKEN) == 0o600
    assert mode(tmp_path / "secrets") == 0o700 and mode(tmp_path / "k8s" / "secrets.yaml") == 0o600
    assert (tmp_path / "secrets" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_a_secrets_directory_others_could_read_is_made_private(tmp_path):
    (tmp_path / "secrets").mkdir(mode=0o755)  # made by hand, or copied with a umask that keeps group and others
    (tmp_path / "secrets").chmod(0o755)
    rendered(tmp_path)
    assert mode(tmp_path / "secrets") == 0o700


def test_rendering_again_into_the_bundle_keeps_its_secrets_and_another_bundle_gets_its_own(tmp_path):
    rendered(tmp_path / "a")
    first = secrets_in(tmp_path / "a")
    rendered(tmp_path / "a")
    assert secrets_in(tmp_path / "a") == first
    manifest = yaml.safe_load((tmp_path / "a" / "k8s" / "secrets.yaml").read_text())
    assert tuple(base64.b64decode(manifest["data"][key]).decode() for key in ("kv.key", "admin.token")) == first
    rendered(tmp_path / "b")
    assert set(secrets_in(tmp_path / "b")).isdisjoint(first)


def test_a_kept_secret_that_others_can_read_is_refused_not_reused(tmp_path):
    rendered(tmp_path)
    (tmp_path / ADMIN_TOKEN).chmod(0o644)
    with pytest.raises(InputError, match="open to other users") as refused:
        rendered(tmp_path)
    assert "chmod 600" in refused.value.fix


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_no_secret_is_among_the_rendered_files(name, tmp_path):
    result = rendered(tmp_path, name)
    kv, token = secrets_in(tmp_path)
    assert not any(path.startswith("secrets/") or path == "k8s/secrets.yaml" for path in result.files)
    assert not any(kv in text or token in text for text in result.files.values())
    assert not any(kv in path.read_text() or token in path.read_text() for path in tmp_path.rglob("*.sh"))


def test_the_secret_manifest_passes_the_kubernetes_schema_and_is_the_one_the_pods_mount(tmp_path):
    result = rendered(tmp_path, "atlas-800t-a3-x4-deepseek-r1", "k8s")  # with a LeaderWorkerSet
    secret = yaml.safe_load((tmp_path / "k8s" / "secrets.yaml").read_text())
    kubernetes_validate.validate(secret, K8S_VERSION, strict=True)
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    pods = []
    manifests = [text for path, text in result.files.items() if path.startswith("k8s/")]
    for text in manifests:
        for obj in yaml.safe_load_all(text):
            if obj["kind"] == "Deployment":
                pods.append((obj["metadata"]["labels"]["app.kubernetes.io/component"], obj["spec"]["template"]["spec"]))
            elif obj["kind"] == "LeaderWorkerSet":
                pods += [("engine", t["spec"]) for t in obj["spec"]["leaderWorkerTemplate"].values()
                         if isinstance(t, dict) and "spec" in t]
    assert {component for component, _ in pods} == {"engine", "proxy"} and len(pods) > 2
    for component, pod in pods:
        volume = next(v["secret"] for v in pod["volumes"] if "secret" in v)
        assert volume["secretName"] == secret["metadata"]["name"] and volume["defaultMode"] == K8S_SECRET_MODE == 256
        keys = {item["key"] for item in volume["items"]}
        assert keys == ({"admin.token"} if component == "proxy" else {"kv.key"})  # each holds what it needs, no more
        container = pod["containers"][0]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert K8S_SECRET_MOUNT in mounts
        # the kubelet cannot make a mount point inside another (read-only) volume
        assert not any(K8S_SECRET_MOUNT.startswith(other + "/") for other in mounts)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.get(KV_SECRET_ENV) == (None if component == "proxy" else f"{K8S_SECRET_MOUNT}/kv.key")
        assert env.get(ADMIN_TOKEN_FILE_ENV) == (f"{K8S_SECRET_MOUNT}/admin.token" if component == "proxy" else None)
        assert "--admin-token" not in container["command"]


def test_the_bash_target_writes_no_secret_manifest(tmp_path):
    result = rendered(tmp_path, target="bash")
    assert result.k8s_deployment is None and not (tmp_path / "k8s").exists() and (tmp_path / KV_SECRET).exists()


def _run(script, env_path: str, tmp_path):
    """Run a rendered launcher with an `ascend-pd` and a `python3` on PATH that print what they were given."""
    stub_dir = tmp_path / "stubs"
    stub_dir.mkdir(exist_ok=True)
    for name in ("ascend-pd", "python3"):
        stub = stub_dir / name
        stub.write_text("#!/bin/sh\necho \"$0 $*\"\necho \"kv=$ASCEND_PD_KV_SECRET_FILE\"\n"
                        "echo \"admin=$ASCEND_PD_PROXY_ADMIN_TOKEN_FILE\"\n")
        stub.chmod(0o755)
    inherited = {k: v for k, v in os.environ.items() if k not in (KV_SECRET_ENV, ADMIN_TOKEN_FILE_ENV)}
    env = {**inherited, "PATH": f"{stub_dir}:{env_path}", "LOG_DIR": str(tmp_path / "logs"),
           "RUN_DIR": str(tmp_path / "run")}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=30)


def _log_once_written(path, seconds: float = 10.0) -> str:
    """The log of a process the launcher started in the background, once it has said all it says."""
    deadline = time.monotonic() + seconds
    while not (path.exists() and "admin=" in path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text()


def test_each_launcher_points_its_processes_at_the_one_secret_they_read_and_never_passes_the_token(tmp_path):
    bundle = tmp_path / "bundle"
    rendered(bundle, target="bash")
    done = _run(bundle / "launch-proxy.sh", os.environ["PATH"], tmp_path)
    assert done.returncode == 0, done.stderr
    said = _log_once_written(tmp_path / "logs" / "proxy.log")
    assert f"admin={bundle / ADMIN_TOKEN}" in said and "kv=\n" in said  # no proxy code reads the KV secret
    assert secrets_in(bundle)[1] not in said and "--admin-token" not in said
    done = _run(bundle / "launch-localhost-00.sh", os.environ["PATH"], tmp_path)
    assert done.returncode == 0, done.stderr
    engine_logs = [log for log in (tmp_path / "logs").glob("*.log") if log.name != "proxy.log"]
    assert len(engine_logs) == 2  # prefill and decode
    for log in engine_logs:
        said = _log_once_written(log)
        assert f"kv={bundle / KV_SECRET}" in said and "admin=\n" in said, said


def test_a_bundle_copied_without_its_secrets_refuses_to_start_saying_why(tmp_path):
    bundle = tmp_path / "bundle"
    rendered(bundle, target="bash")
    (bundle / KV_SECRET).unlink()
    done = _run(bundle / "launch-localhost-00.sh", os.environ["PATH"], tmp_path)
    assert done.returncode == 1 and "copy the whole bundle, secrets/ included" in done.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").iterdir())


def test_render_on_the_command_line_says_where_the_secrets_are_and_never_prints_them(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["render", str(EXAMPLES / "local-cpu-tiny-gqa.yaml"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{out}/secrets/" in result.output
    assert not any(secret in result.output for secret in secrets_in(out))


def test_an_interface_that_would_break_a_launcher_is_refused(tmp_path):
    with pytest.raises(InputError) as refused:
        bundle_of("local-cpu-tiny-gqa", RenderOptions(interface="lo\nrm -rf ~"))
    assert refused.value.field == "--interface" and "'\\n'" in refused.value.message
    result = CliRunner().invoke(cli, ["render", str(EXAMPLES / "local-cpu-tiny-gqa.yaml"), "--out", str(tmp_path),
                                      "--interface", "eth0/x"])
    assert result.exit_code == 2 and "--interface" in result.output and "Traceback" not in result.output


def test_a_rollout_renders_the_changed_deployment_with_the_secrets_the_running_engines_hold(tmp_path):
    import io

    from ascend_pd.autoscale.proxy_admin import ProxyAdmin
    from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
    from ascend_pd.autoscale.settings import RolloutTimeouts
    from tests.unit.autoscale.bundles import one_more_decode, recording_kubectl

    bundle = tmp_path / "bundle"
    rendered(bundle, target="k8s")
    before = secrets_in(bundle), (bundle / "k8s" / "secrets.yaml").read_text()
    current = load_deployment(bundle / "deployment.yaml")
    target, steps = one_more_decode(current)
    kubectl, _ = recording_kubectl(tmp_path)
    log = RolloutLog(io.StringIO())
    # no pod starts (kubectl records), so decode-1 never gets healthy: rendered, launched, taken back
    Rollout(bundle / "deployment.yaml", ProxyAdmin("http://127.0.0.1:9", None, timeout=1),
            Launcher(bundle, "k8s", kubectl=kubectl), log, RolloutTimeouts(start=1.0)).run(
        current.deployment, target, steps)
    assert ("launch", "ok") in [(line.get("phase"), line.get("status")) for line in log.lines]
    assert (secrets_in(bundle), (bundle / "k8s" / "secrets.yaml").read_text()) == before
    assert before[0][0] not in json.dumps(log.lines)  # the manifest diff it logs holds no secret
