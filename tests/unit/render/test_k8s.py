"""The k8s target: core objects pass the Kubernetes schema offline, pods ask for the right devices and nodes, and
each pod starts exactly the command lines the bash launchers start."""

import re

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from ascend_pd.render import RenderOptions

from .conftest import EXAMPLE_NAMES, bundle_of, known_bundle

K8S_VERSION = latest_version()


def documents(files):
    return {path: list(yaml.safe_load_all(text)) for path, text in files.items() if path.startswith("k8s/")}


def as_pods(obj):
    """LeaderWorkerSet is not a core kind; its pod templates are, so they are checked as Pods."""
    templates = obj["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        yield {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"check-{part.lower()}",
                                                                **templates[part]["metadata"]},
               "spec": templates[part]["spec"]}


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_core_objects_pass_the_kubernetes_schema(name):
    checked = 0
    for docs in documents(bundle_of(name, RenderOptions(target="k8s")).files).values():
        for obj in docs:
            for core in (as_pods(obj) if obj["kind"] == "LeaderWorkerSet" else [obj]):
                kubernetes_validate.validate(core, K8S_VERSION, strict=True)
                checked += 1
    assert checked >= 4


def test_the_schema_check_can_fail():
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": "http"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_multi_node_instance_is_a_leader_worker_set_and_single_node_ones_are_deployments():
    docs = documents(known_bundle("atlas-800t-a3-x4-deepseek-r1").files)
    lws, = docs["k8s/decode-0.yaml"]
    assert lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert leader["nodeSelector"] == {"kubernetes.io/hostname": "a3-02"}
    assert worker["nodeSelector"] == {"kubernetes.io/hostname": "a3-03"}
    # 16 single-device DP ranks on each node; A3 nodes advertise huawei.com/ascend-1980
    assert leader["containers"][0]["resources"]["limits"] == {"huawei.com/ascend-1980": "16"}
    prefill, = docs["k8s/prefill-0.yaml"]
    assert prefill["kind"] == "Deployment"
    assert prefill["spec"]["template"]["spec"]["hostNetwork"] is True


def test_a2_pods_request_huawei_ascend910_and_mount_the_driver():
    docs = documents(known_bundle("atlas-800i-a2-x4-qwen3-32b").files)
    pod = docs["k8s/prefill-1.yaml"][0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["requests"] == {"huawei.com/Ascend910": "4"}
    mounted = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/dev/davinci_manager", "/usr/local/Ascend/driver/lib64", "/etc/hccn.conf", "/models/Qwen3-32B"} <= mounted


def test_proxy_has_a_deployment_and_a_service_on_its_port():
    docs = documents(known_bundle("cloudmatrix384-deepseek-r1").files)
    deployment, service = docs["k8s/proxy.yaml"]
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    # one template for every replica: each listens on and advertises the host it lands on
    # the backend table from the ConfigMap mounted whole (k8s/backends.yaml), which the autoscaler writes
    assert command == ["ascend-pd", "proxy", "--deployment", "/etc/ascend-pd/config/deployment.yaml",
                       "--backend-table", "/etc/ascend-pd-backends/backends.json",
                       "--host", "$(HOST_IP)", "--port", "8080", "--advertise-url", "http://$(HOST_IP):8080"]
    (table_map,) = docs["k8s/backends.yaml"]
    assert table_map["kind"] == "ConfigMap" and table_map["data"] == {}  # the replicas start from the deployment
    assert service["spec"]["ports"][0]["port"] == 8080
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def start_blocks(script):
    """Each `start NAME ...` command with its continuation lines, indentation removed."""
    blocks, current = {}, None
    for line in script.splitlines():
        text = line.strip()
        if text.startswith("start "):
            current = text.split()[1]
            blocks[current] = [text]
        elif current and blocks[current][-1].endswith("\\"):
            blocks[current].append(text)
        else:
            current = None
    return blocks


@pytest.mark.parametrize("name", ["atlas-800t-a3-x4-deepseek-r1", "local-cpu-tiny-gqa"])
def test_pods_start_the_same_command_lines_as_the_bash_launchers(name):
    files = bundle_of(name).files
    bash = {}
    for path, text in files.items():
        if re.fullmatch(r"launch-.*\.sh", path) and not path.startswith("launch-proxy"):
            bash.update(start_blocks(text))
    configmap, = documents(files)["k8s/configmap.yaml"]
    pods = {}
    for key, text in configmap["data"].items():
        if key.startswith("serve-"):
            pods.update(start_blocks(text))
    assert pods == bash and len(bash) >= 2
    assert configmap["data"]["deployment.yaml"] == files["deployment.yaml"]
