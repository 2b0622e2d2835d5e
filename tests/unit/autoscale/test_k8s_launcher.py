"""The k8s target of a rollout: kubectl applies the config map and the instance's manifest, deletes a leaving
instance's manifest (and the file, so `kubectl apply -f k8s/` cannot bring it back), and the plan line carries the
diff of the manifests. kubectl is a recording stand-in: no cluster here."""

import io
import json

from ascend_pd.autoscale.proxy_admin import ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import Timeouts
from ascend_pd.deploy import load_deployment
from ascend_pd.planner.resize import counts_of
from ascend_pd.render.processes import plan_processes

from .bundles import example_bundle, one_more_decode, recording_kubectl


def test_k8s_start_and_stop_apply_and_delete_the_instance_manifest(tmp_path):
    deployment_file = example_bundle(tmp_path, "k8s")
    bundle = deployment_file.parent
    loaded = load_deployment(deployment_file)
    kubectl, calls = recording_kubectl(tmp_path)
    launcher = Launcher(bundle, "k8s", kubectl=kubectl)
    plan = plan_processes(loaded)
    launcher.start(plan, "decode-0")
    launcher.stop(plan, "decode-0")
    applied, deleted = [json.loads(line) for line in calls.read_text().splitlines()]
    assert applied == ["apply", "-f", str(bundle / "k8s/configmap.yaml"), "-f", str(bundle / "k8s/decode-0.yaml")]
    assert deleted == ["delete", "--ignore-not-found", "-f", str(bundle / "k8s/decode-0.yaml")]
    assert not (bundle / "k8s/decode-0.yaml").exists()


def test_a_k8s_rollout_logs_the_manifest_diff_and_takes_back_an_instance_that_never_gets_healthy(tmp_path):
    deployment_file = example_bundle(tmp_path, "k8s")
    bundle = deployment_file.parent
    current = load_deployment(deployment_file)
    target, steps = one_more_decode(current)
    log = RolloutLog(io.StringIO())
    kubectl, calls = recording_kubectl(tmp_path)
    # kubectl only records: no pod starts, so decode-1 never answers /health
    after = Rollout(deployment_file, ProxyAdmin("http://127.0.0.1:9", None, timeout=1),
                    Launcher(bundle, "k8s", kubectl=kubectl), log, Timeouts(start=1.0)).run(
        current.deployment, target, steps)
    plan_line = log.lines[0]
    assert plan_line["phase"] == "plan" and "+# k8s/decode-1.yaml" in plan_line["manifest_diff"]
    phases = [(line.get("phase"), line.get("status")) for line in log.lines[1:]]
    assert phases[:3] == [("launch", "ok"), ("healthy", "failed"), ("stop-unhealthy", "ok")]
    verbs = [json.loads(line)[0] for line in calls.read_text().splitlines()]
    assert verbs == ["apply", "delete"] and not (bundle / "k8s/decode-1.yaml").exists()
    assert counts_of(after) == counts_of(current.deployment) == counts_of(load_deployment(deployment_file).deployment)
