"""Proxy workers and replicas: one bash launcher per replica node, each listening on and advertising its own address,
stop scripts that stop them, and one k8s Deployment that spreads a pod over each replica node."""

import shlex

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from ascend_pd.render import RenderOptions, render_bundle

from .conftest import loaded_from

# cloudmatrix384 numbers its hosts from 192.168.16.11: cm0-n00 .11, cm0-n02 .13, cm0-n05 .16
REPLICAS = {"cm0-n00": "192.168.16.11", "cm0-n02": "192.168.16.13", "cm0-n05": "192.168.16.16"}


@pytest.fixture
def replicated(cm384_example) -> dict:
    """cm0-n02 also serves decode ranks; cm0-n05 runs nothing but its proxy replica."""
    cm384_example["proxy"].update(workers=4, extra_nodes=["cm0-n02", "cm0-n05"])
    return cm384_example


def render(data: dict, **options):
    result = render_bundle(loaded_from(data), RenderOptions(**options))
    assert not result.refused, result.diagnostics
    return result.files


def started(script: str) -> tuple[str, list[str]]:
    """The name and command of the one `start NAME COMMAND...` line of a proxy launcher."""
    line, = [line for line in script.splitlines() if line.startswith("start ")]
    words = shlex.split(line)
    return words[1], words[2:]


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def stopped(script: str) -> list[str]:
    # the names it stops when called without any ('stop "$@"' stops the ones it is given)
    line, = [line.strip() for line in script.splitlines() if line.strip().startswith("stop ") and "$@" not in line]
    return shlex.split(line)[1:]


def test_one_launcher_per_replica_each_on_its_own_address(replicated):
    files = render(replicated, target="bash")
    launchers = {path for path in files if path.startswith("launch-proxy")}
    assert launchers == {"launch-proxy.sh", "launch-proxy-cm0-n02.sh", "launch-proxy-cm0-n05.sh"}
    for node, ip in REPLICAS.items():
        name, argv = started(files["launch-proxy.sh" if node == "cm0-n00" else f"launch-proxy-{node}.sh"])
        assert name == ("proxy" if node == "cm0-n00" else f"proxy-{node}")
        assert argv[:4] == ["ascend-pd", "proxy", "--deployment", "$HERE/deployment.yaml"]
        assert (flag(argv, "--host"), flag(argv, "--port"), flag(argv, "--workers")) == (ip, "8080", "4")
        # proxy.node's address is what the proxy advertises by itself; every other replica names its own
        assert flag(argv, "--advertise-url") == (None if node == "cm0-n00" else f"http://{ip}:8080")


def test_stop_scripts_stop_the_replica_of_their_node(replicated):
    files = render(replicated, target="bash")
    assert stopped(files["stop-cm0-n00.sh"])[-1] == "proxy"
    assert stopped(files["stop-cm0-n02.sh"])[-1] == "proxy-cm0-n02"
    assert "decode-0-dp0" in stopped(files["stop-cm0-n02.sh"])
    assert stopped(files["stop-cm0-n05.sh"]) == ["proxy-cm0-n05"]
    assert "# Stop the proxy that launch-proxy-cm0-n05.sh started on cm0-n05." in files["stop-cm0-n05.sh"]
    assert "proxy" not in " ".join(stopped(files["stop-cm0-n01.sh"]))
    assert "launch-cm0-n05.sh" not in files  # no serving process there


def test_readme_lists_every_replica_with_its_address_and_workers(replicated):
    readme = render(replicated)["README.md"]
    assert "Start the proxy's 3 replicas, one per node below; each fronts every instance and runs 4 worker " \
           "processes on one port:" in readme
    for node, ip in REPLICAS.items():
        script = "launch-proxy.sh" if node == "cm0-n00" else f"launch-proxy-{node}.sh"
        assert f"   - `{node}` ({ip}:8080): `bash {script}`" in readme
    assert "| cm0-n05 | proxy-cm0-n05 | 192.168.16.16:8080, policy least-loaded, 4 worker processes |" in readme
    assert "one replica on each of `cm0-n00`, `cm0-n02`, `cm0-n05`" in readme


def test_single_replica_readme_says_the_worker_default(cm384_example):
    readme = render(cm384_example)["README.md"]
    assert "Start the proxy, which runs one worker process per core available to it" in readme
    cm384_example["proxy"]["workers"] = 1
    assert "Start the proxy, which runs 1 worker process," in render(cm384_example)["README.md"]


def test_a_site_address_of_the_proxy_node_is_where_it_listens_and_what_it_advertises(cm384_example):
    cm384_example["node_addresses"] = {"cm0-n00": "10.1.0.1"}
    files = render(cm384_example, target="bash")
    _, argv = started(files["launch-proxy.sh"])
    # the proxy reads the same address from the bundle's deployment.yaml, so it needs no --advertise-url
    assert (flag(argv, "--host"), flag(argv, "--advertise-url")) == ("10.1.0.1", None)
    assert yaml.safe_load(files["deployment.yaml"])["node_addresses"] == {"cm0-n00": "10.1.0.1"}


def proxy_documents(files):
    deployment, service = yaml.safe_load_all(files["k8s/proxy.yaml"])
    return deployment, service


def test_k8s_runs_a_pod_per_replica_node_one_per_node(replicated):
    deployment, service = proxy_documents(render(replicated, target="k8s"))
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 3
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": ["cm0-n00", "cm0-n02", "cm0-n05"]}]}]
    apart, = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert apart["topologyKey"] == "kubernetes.io/hostname"
    assert apart["labelSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert "nodeSelector" not in pod and pod["hostNetwork"] is True
    # host networking: a surge pod could not bind the port anywhere, so a rollout replaces one pod at a time
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]


def test_k8s_replicas_listen_on_and_advertise_their_host_ip(replicated):
    deployment, _ = proxy_documents(render(replicated, target="k8s"))
    container, = deployment["spec"]["template"]["spec"]["containers"]
    argv = container["command"]
    assert (flag(argv, "--host"), flag(argv, "--workers")) == ("$(HOST_IP)", "4")
    assert flag(argv, "--advertise-url") == "http://$(HOST_IP):8080"
    env = {e["name"]: e for e in container["env"]}
    assert env["HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert container["resources"] == {"requests": {"cpu": "4"}}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8080}


def test_k8s_single_replica_is_pinned_and_requests_no_cpu_without_workers(cm384_example):
    deployment, _ = proxy_documents(render(cm384_example, target="k8s"))
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "cm0-n00"} and "affinity" not in pod
    assert "resources" not in pod["containers"][0] and "--workers" not in pod["containers"][0]["command"]


def test_k8s_proxy_objects_pass_the_kubernetes_schema(replicated):
    for obj in proxy_documents(render(replicated, target="k8s")):
        kubernetes_validate.validate(obj, latest_version(), strict=True)
