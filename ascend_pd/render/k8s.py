"""The Kubernetes target: a ConfigMap, a Deployment or LeaderWorkerSet per instance, the proxy's Deployment (one
replica per proxy node) and Service, and the Secret with the deployment's secrets (written by write_bundle, never
among the rendered files: render/bundle_secrets.py).

Each instance pod runs serve-<instance>.sh from the ConfigMap: the same node sections the bash launchers print, so
both targets start identical command lines."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from ascend_pd.deploy.secrets import (ADMIN_TOKEN, ADMIN_TOKEN_FILE_ENV, K8S_SECRET_MODE, K8S_SECRET_MOUNT,
                                      KV_SECRET, KV_SECRET_ENV)
from ascend_pd.render.bash import proxy_argv
from ascend_pd.render.processes import LaunchPlan
from ascend_pd.render.shell import node_section, quote, script

# Beside the Secret's mount (K8S_SECRET_MOUNT, /etc/ascend-pd/secrets), not above it: the kubelet cannot make a
# mount point inside a ConfigMap volume, which it keeps read-only.
CONFIG_DIR = "/etc/ascend-pd/config"
# The backend table's ConfigMap, mounted whole (the kubelet refreshes a directory mount, never a subPath one)
TABLE_DIR = "/etc/ascend-pd-backends"
TABLE_KEY = "backends.json"
TABLE_MANIFEST = "backends.yaml"  # under k8s/: rendered empty, then the autoscaler's (autoscale/stores.py)
LWS_API = "leaderworkerset.x-k8s.io/v1"
# The Secret's keys are the file names in the bundle; each pod mounts only the keys its processes need.
KV_KEY = Path(KV_SECRET).name
ADMIN_KEY = Path(ADMIN_TOKEN).name
ENGINE_SECRETS = (KV_KEY,)
PROXY_SECRETS = (ADMIN_KEY,)  # the layerwise metaserver checks D with a token of each request's own
SECRET_ENV = {KV_KEY: KV_SECRET_ENV, ADMIN_KEY: ADMIN_TOKEN_FILE_ENV}

# Host paths an Ascend container needs besides the devices the device plugin hands out: the driver's management
# devices, its libraries and tools, and the files HCCL and the transports read (vllm-ascend's container guide).
ASCEND_HOST_PATHS = [
    ("davinci-manager", "/dev/davinci_manager", "CharDevice"),
    ("devmm-svm", "/dev/devmm_svm", "CharDevice"),
    ("hisi-hdc", "/dev/hisi_hdc", "CharDevice"),
    ("dcmi", "/usr/local/dcmi", "Directory"),
    ("npu-smi", "/usr/local/bin/npu-smi", "File"),
    ("hccn-tool", "/usr/local/Ascend/driver/tools/hccn_tool", "File"),
    ("driver-lib64", "/usr/local/Ascend/driver/lib64", "Directory"),
    ("driver-version", "/usr/local/Ascend/driver/version.info", "File"),
    ("ascend-install-info", "/etc/ascend_install.info", "File"),
    ("hccn-conf", "/etc/hccn.conf", "File"),
]


def serve_script(plan: LaunchPlan, instance: str) -> str:
    """Start this instance's processes on the node the pod landed on ($NODE_NAME), then live as long as all do."""
    nodes = plan.instance_nodes(instance)
    body = ['case "${NODE_NAME:?the pod sets NODE_NAME from spec.nodeName}" in']
    for name in nodes:
        node = plan.node(name)
        section = node_section(plan, node, plan.instance_processes(instance, name))
        body += [f"  {quote(name)})"] + [f"    {line}" if line else "" for line in section] + ["    ;;"]
    body += ["  *)", f'    echo "instance {instance} has no processes on node $NODE_NAME" >&2', "    exit 1", "    ;;",
             "esac", "", "# The pod ends, and is restarted, as soon as one of its engines exits.", "wait -n", "exit 1"]
    description = [f"Serve instance '{instance}' of deployment '{plan.deployment.metadata.name}' inside its pod."]
    return script(description, body)


def _labels(plan: LaunchPlan, component: str) -> dict[str, str]:
    return _labels_of(plan.deployment.metadata.name, component)


def _labels_of(deployment_name: str, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "ascend-pd", "app.kubernetes.io/instance": deployment_name,
            "app.kubernetes.io/component": component}


def object_name(deployment_name: str, part: str) -> str:
    """The name of a deployment's object: `<deployment>-<instance>`, `-proxy`, `-config`."""
    return f"{deployment_name}-{part}"


def _object_name(plan: LaunchPlan, part: str) -> str:
    return object_name(plan.deployment.metadata.name, part)


def secret_name(deployment_name: str) -> str:
    return f"{deployment_name}-secrets"


def secret_object(deployment_name: str, kv_secret: str, admin_token: str) -> dict[str, Any]:
    """The deployment's Secret: the bundle's secrets/ files as keys (the manifest is as private as they are)."""
    def encoded(text: str) -> str:
        return base64.b64encode(text.encode("utf-8")).decode("ascii")

    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(deployment_name), "labels": _labels_of(deployment_name, "secrets")},
            "data": {KV_KEY: encoded(kv_secret), ADMIN_KEY: encoded(admin_token)}}


def _volumes(plan: LaunchPlan, with_ascend: bool, secrets: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": _object_name(plan, "config"), "defaultMode": 0o755}},
        {"name": "secrets", "secret": {"secretName": secret_name(plan.deployment.metadata.name),
                                       "defaultMode": K8S_SECRET_MODE,
                                       "items": [{"key": key, "path": key} for key in secrets]}}]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                                    {"name": "secrets", "mountPath": K8S_SECRET_MOUNT, "readOnly": True}]
    if not with_ascend:
        return volumes, mounts
    volumes += [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "model", "hostPath": {"path": plan.deployment.model.path, "type": "Directory"}}]
    mounts += [{"name": "dshm", "mountPath": "/dev/shm"},
               {"name": "model", "mountPath": plan.deployment.model.path, "readOnly": True}]
    for name, path, kind in ASCEND_HOST_PATHS:
        volumes.append({"name": name, "hostPath": {"path": path, "type": kind}})
        mounts.append({"name": name, "mountPath": path, "readOnly": kind != "CharDevice"})
    return volumes, mounts


def _pod_spec(plan: LaunchPlan, command: list[str], resources: dict[str, int], placement: dict[str, Any],
              with_devices: bool, image: str, secrets: tuple[str, ...]) -> dict[str, Any]:
    volumes, mounts = _volumes(plan, with_devices and plan.platform != "cpu", secrets)
    container: dict[str, Any] = {
        "name": "main", "image": image, "command": command,
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "RUN_DIR", "value": "/tmp/ascend-pd/run"},
                {"name": "LOG_DIR", "value": "/tmp/ascend-pd/logs"},
                *({"name": SECRET_ENV[key], "value": f"{K8S_SECRET_MOUNT}/{key}"} for key in secrets)],
        "volumeMounts": mounts,
    }
    if resources:
        quantities = {k: str(v) for k, v in resources.items()}
        container["resources"] = {"limits": quantities, "requests": quantities}
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", **placement,
            "containers": [container], "volumes": volumes}


def _pinned(node: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": node}}


def _spread_over(nodes: list[str], labels: dict[str, str]) -> dict[str, Any]:
    """One pod on each of `nodes`, for pods that share one template and so cannot be pinned one by one: the workers
    of a group (each serves the part of the instance its node holds) and the proxy's replicas."""
    return {"affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}}


def _device_request(plan: LaunchPlan, instance: str, node: str) -> dict[str, int]:
    count = sum(len(p.devices) for p in plan.instance_processes(instance, node))
    return {plan.cluster.node(node).resource_name: count}


def instance_objects(plan: LaunchPlan, instance: str, image: str) -> list[dict[str, Any]]:
    nodes = plan.instance_nodes(instance)
    name = _object_name(plan, instance)
    labels = {**_labels(plan, "engine"), "ascend-pd/engine": instance}
    command = ["bash", f"{CONFIG_DIR}/serve-{instance}.sh"]
    if len(nodes) == 1:
        template = {"metadata": {"labels": labels},
                    "spec": _pod_spec(plan, command, _device_request(plan, instance, nodes[0]), _pinned(nodes[0]),
                                      True, image, ENGINE_SECRETS)}
        return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                 "spec": {"replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": labels},
                          "template": template}}]
    worker_labels = {**labels, "ascend-pd/part": "worker"}
    leader = {"metadata": {"labels": {**labels, "ascend-pd/part": "leader"}},
              "spec": _pod_spec(plan, command, _device_request(plan, instance, nodes[0]), _pinned(nodes[0]), True,
                                image, ENGINE_SECRETS)}
    workers = nodes[1:]
    worker_placement = _pinned(workers[0]) if len(workers) == 1 else _spread_over(workers, worker_labels)
    worker = {"metadata": {"labels": worker_labels},
              "spec": _pod_spec(plan, command, _device_request(plan, instance, workers[0]), worker_placement, True,
                                image, ENGINE_SECRETS)}
    return [{"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": {"name": name, "labels": labels},
             "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                      "leaderWorkerTemplate": {"size": len(nodes), "restartPolicy": "RecreateGroupOnPodRestart",
                                               "leaderTemplate": leader, "workerTemplate": worker}}}]


def config_map(plan: LaunchPlan, deployment_yaml: str, cluster_yaml: str | None = None) -> dict[str, Any]:
    data = {"deployment.yaml": deployment_yaml}
    if cluster_yaml is not None:  # the deployment names it as a file beside itself (render/bundle.py)
        data["cluster.yaml"] = cluster_yaml
    for instance in plan.deployment.instances:
        data[f"serve-{instance.name}.sh"] = serve_script(plan, instance.name)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": _object_name(plan, "config"), "labels": _labels(plan, "config")}, "data": data}


def backend_table_name(deployment_name: str) -> str:
    return f"{deployment_name}-backends"


def backend_table_map(deployment_name: str, table_json: str | None = None) -> dict[str, Any]:
    """The ConfigMap every proxy replica reads its backend table from. Rendered empty (the replicas start from the
    deployment file); `ascend-pd autoscale` writes the table into it with each change."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": backend_table_name(deployment_name), "labels": _labels_of(deployment_name,
                                                                                          "backends")},
            "data": {TABLE_KEY: table_json} if table_json is not None else {}}


def _proxy_container(plan: LaunchPlan, container: dict[str, Any]) -> None:
    """The proxy's ports, probe and CPU request on the container _pod_spec built."""
    proxy = plan.deployment.proxy
    # Pods use host networking, so the pod IP kubelet probes and the Service targets is the node's: status.hostIP.
    container["env"].append({"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}})
    container["ports"] = [{"name": "http", "containerPort": proxy.port}]
    # /health rather than a TCP check: it answers 503 while this replica cannot form a P/D pair, so the Service
    # sends requests only to replicas that can serve them (a replica cut off from the engines drops out while the
    # others serve); when no replica can, requests would fail anyway.
    container["readinessProbe"] = {"httpGet": {"path": "/health", "port": proxy.port}, "periodSeconds": 5}
    if proxy.workers is not None:
        # A request, without a limit: a CFS quota would throttle the event loops in bursts and add latency.
        container["resources"] = {"requests": {"cpu": str(proxy.workers)}}


def proxy_objects(plan: LaunchPlan, image: str) -> list[dict[str, Any]]:
    proxy = plan.deployment.proxy
    name = _object_name(plan, "proxy")
    labels = _labels(plan, "proxy")
    nodes = proxy.nodes
    placement = _pinned(nodes[0]) if len(nodes) == 1 else _spread_over(nodes, labels)
    # One pod template for every replica: each listens on, and advertises, the address of the node it runs on.
    command = proxy_argv(plan, f"{CONFIG_DIR}/deployment.yaml", "$(HOST_IP)", f"http://$(HOST_IP):{proxy.port}",
                         f"{TABLE_DIR}/{TABLE_KEY}")
    spec = _pod_spec(plan, command, {}, placement, False, image, PROXY_SECRETS)
    table_map = backend_table_name(plan.deployment.metadata.name)
    spec["volumes"].append({"name": "backends", "configMap": {"name": table_map}})
    spec["containers"][0]["volumeMounts"].append({"name": "backends", "mountPath": TABLE_DIR, "readOnly": True})
    _proxy_container(plan, spec["containers"][0])
    # Each replica holds its node's port and no spare node is allowed, so a surge pod could never be scheduled:
    # a rollout replaces one replica at a time instead.
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                  "spec": {"replicas": len(nodes), "strategy": strategy, "selector": {"matchLabels": labels},
                           "template": {"metadata": {"labels": labels}, "spec": spec}}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
               "spec": {"selector": labels,
                        "ports": [{"name": "http", "port": proxy.port, "targetPort": proxy.port, "protocol": "TCP"}]}}
    return [deployment, service]


def k8s_objects(plan: LaunchPlan, deployment_yaml: str, image: str,
                cluster_yaml: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """File name (under k8s/) -> the objects it holds."""
    files = {"configmap.yaml": [config_map(plan, deployment_yaml, cluster_yaml)]}
    for instance in plan.deployment.instances:
        files[f"{instance.name}.yaml"] = instance_objects(plan, instance.name, image)
    files["proxy.yaml"] = proxy_objects(plan, image)
    files[TABLE_MANIFEST] = [backend_table_map(plan.deployment.metadata.name)]
    return files
