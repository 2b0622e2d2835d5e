"""The k8s target of a rollout: kubectl applies the config map and the instance's manifest, deletes a leaving
instance's manifest (and the file, so `kubectl apply -f k8s/` cannot bring it back), and the plan line carries the
diff of the manifests. kubectl is a recording stand-in: no cluster here."""

import io
import json

from ascend_pd.autoscale.proxy_admin import ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import RolloutTimeouts
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
                    Launcher(bundle, "k8s", kubectl=kubectl), log, RolloutTimeouts(start=1.0)).run(
        current.deployment, target, steps)
    plan_line = log.lines[0]
    assert plan_line["phase"] == "plan" and "+# k8s/decode-1.yaml" in plan_line["manifest_diff"]
    phases = [(line.get("phase"), line.get("status")) for line in log.lines[1:]]
    assert phases[:3] == [("launch", "ok"), ("healthy", "failed"), ("stop-unhealthy", "ok")]
    verbs = [json.loads(line)[0] for line in calls.read_text().splitlines()]
    assert verbs == ["apply", "delete"] and not (bundle / "k8s/decode-1.yaml").exists()
    assert counts_of(after) == counts_of(current.deployment) == counts_of(load_deployment(deployment_file).deployment)


def test_the_backend_table_goes_into_the_configmap_the_proxy_pods_mount(tmp_path):
    import yaml

    from ascend_pd.autoscale.stores import table_store
    from ascend_pd.proxy.backend_table import BackendTable, TableEntry, decode_table

    deployment = example_bundle(tmp_path, "k8s")
    kubectl, calls = recording_kubectl(tmp_path)
    loaded = load_deployment(deployment)
    store = table_store(loaded, deployment.parent, "k8s", kubectl)
    table = BackendTable(4, "rev", [TableEntry("http://127.0.0.1:8100", "prefill", draining=True)])
    store.write(table)
    manifest = deployment.parent / "k8s" / "backends.yaml"
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [["apply", "-f", str(manifest)]]
    applied = yaml.safe_load(manifest.read_text())
    # the name and key the rendered proxy Deployment mounts (as a directory, which the kubelet refreshes)
    proxy = yaml.safe_load_all((deployment.parent / "k8s" / "proxy.yaml").read_text())
    pod = next(d for d in proxy if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "backends")
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "backends")
    assert volume["configMap"]["name"] == applied["metadata"]["name"] and "subPath" not in mount
    command = pod["containers"][0]["command"]
    assert command[command.index("--backend-table") + 1] == f"{mount['mountPath']}/backends.json"
    assert decode_table(applied["data"]["backends.json"].encode(), "configmap") == table
    assert store.read() == table  # and the bundle's copy, for the next start of the autoscaler
