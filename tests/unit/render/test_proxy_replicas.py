"""Proxy workers and replicas: one bash launcher per replica node, each listening on and advertising its own address,
stop scripts that stop them, and one k8s Deployment that spreads a pod over each replica node."""

import shlex
import subprocess

import httpx
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from ascend_pd.render import RenderOptions, render_bundle
from tests.fakes.threaded_http import Server, send

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


def metaserver_lines(script: str) -> list[str]:
    """The lines of a rendered script that add the proxy replicas to no_proxy (a pod's script indents them under
    its node's case)."""
    lines = [line.strip() for line in script.splitlines()]
    start = lines.index('no_proxy="${no_proxy:-${NO_PROXY:-}}"')
    return lines[start:start + 3]


def test_a_layerwise_d_posts_to_every_replica_directly_though_the_environment_names_an_http_proxy(
        replicated, monkeypatch):
    """vllm-ascend's layerwise D posts to a replica's metaserver with an httpx client that trusts the environment.
    Each engine node's rendered lines must add every replica to no_proxy, keeping what the site lists, or the post
    (with the request's token in its URL) goes to the site's HTTP proxy: here a server that records what it gets.
    The replicas are at loopback addresses of their own (given as with --node-ip), where a stand-in listens."""
    posted = []

    def metaserver(handler):
        posted.append(handler.server.server_address[0])
        send(handler, 200, b"{}")

    replicas = {"cm0-n00": "127.0.0.11", "cm0-n02": "127.0.0.13", "cm0-n05": "127.0.0.16"}
    first = Server(metaserver, host=replicas["cm0-n00"])
    stand_ins = [first] + [Server(metaserver, host=replicas[node], port=first.http.server_port)
                           for node in ("cm0-n02", "cm0-n05")]
    site_proxy = Server(lambda handler: send(handler, 502, b"{}"))
    replicated["connector"].update(implementation="vllm-ascend", mode="push")
    replicated["proxy"]["port"] = first.http.server_port
    result = render_bundle(loaded_from(replicated).with_node_addresses(replicas), RenderOptions())
    assert not result.refused, result.diagnostics
    files = result.files
    scripts = [files[path] for path in files if path.startswith("launch-cm")]
    scripts += [text for name, text in yaml.safe_load(files["k8s/configmap.yaml"])["data"].items()
                if name.startswith("serve-")]
    assert len(scripts) == 7  # the launchers of the four engine nodes, and the scripts of the three instances' pods

    def post_to_every_replica() -> list[int]:
        with httpx.Client(timeout=5) as client:  # as vllm-ascend makes it: the environment's proxies trusted
            return [client.post(f"http://token@{host}:{first.http.server_port}/v1/metaserver", json={}).status_code
                    for host in replicas.values()]

    monkeypatch.setenv("http_proxy", site_proxy.url)
    try:
        for script in scripts:
            for before in ("", "NO_PROXY=mirror.corp.example", "no_proxy=mirror.corp.example"):
                shell = "\n".join([before, *metaserver_lines(script), 'echo "$no_proxy"', 'echo "$NO_PROXY"'])
                shown = subprocess.run(["env", "-i", "bash", "-c", shell], capture_output=True, text=True,
                                       check=True).stdout.split()
                assert shown[0] == shown[1] and set(replicas.values()) <= set(shown[0].split(","))
                assert ("mirror.corp.example" in shown[0].split(",")) == bool(before)
                monkeypatch.setenv("no_proxy", shown[0])
                posted.clear()
                assert post_to_every_replica() == [200] * len(stand_ins)
                assert posted == list(replicas.values())
        assert site_proxy.requests == []
        # without the lines, the same client hands the posts to the site's proxy: the checks above can fail
        monkeypatch.setenv("no_proxy", "mirror.corp.example")
        assert post_to_every_replica() == [502] * len(stand_ins)
        assert len(site_proxy.requests) == len(stand_ins)
    finally:
        for server in (*stand_ins, site_proxy):
            server.close()
