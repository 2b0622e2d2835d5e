"""The bash target: launch-<node>.sh and stop-<node>.sh for every node, launch-proxy.sh, and a README for DIR."""

from __future__ import annotations

from ascend_pd.render.processes import LaunchPlan, NodePlan
from ascend_pd.render.shell import node_section, process_summary, quote, script

STOP_BODY = """\
# stop NAME...: SIGTERM each process group start() created, then SIGKILL what is left after STOP_TIMEOUT seconds.
stop() {
  local pids=() name pidfile pid
  for name in "$@"; do
    pidfile="$RUN_DIR/$name.pid"
    [[ -f "$pidfile" ]] || continue
    pid="$(cat "$pidfile")"
    if kill -TERM -- "-$pid" 2>/dev/null; then
      echo "stopping $name (pid $pid)"
      pids+=("$pid")
    fi
    rm -f "$pidfile"
  done
  local deadline=$((SECONDS + ${STOP_TIMEOUT:-30}))
  for pid in "${pids[@]}"; do
    while kill -0 -- "-$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 1
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
}
"""


def launch_script(plan: LaunchPlan, node: NodePlan) -> str:
    description = [f"Start every serving process of deployment '{plan.deployment.metadata.name}' on node {node.name}.",
                   "Processes run in the background; logs go to $LOG_DIR (default: logs/ beside this script)."]
    body = node_section(plan, node, node.processes)
    return script(description, body)


def stop_script(plan: LaunchPlan, node_name: str) -> str:
    names = [p.name for p in plan.processes_on(node_name)]
    if plan.deployment.proxy.node == node_name:
        names.append("proxy")
    description = [f"Stop what launch-{node_name}.sh (and launch-proxy.sh, on the proxy node) started on {node_name}."]
    body = [STOP_BODY, "stop " + " ".join(quote(n) for n in names)]
    return script(description, body)


def proxy_argv(plan: LaunchPlan, deployment_path: str) -> list[str]:
    proxy = plan.deployment.proxy
    return ["ascend-pd", "proxy", "--deployment", deployment_path, "--host", plan.proxy_network.host_ip,
            "--port", str(proxy.port)]


def proxy_script(plan: LaunchPlan) -> str:
    proxy = plan.deployment.proxy
    description = [f"Start the ascend-pd proxy of deployment '{plan.deployment.metadata.name}' on node {proxy.node}; "
                   "it reads its backends from deployment.yaml."]
    words = " ".join(quote(w) for w in ["start", "proxy", *proxy_argv(plan, "DEPLOYMENT")])
    body = [f"# The proxy listens on {plan.proxy_network.host_ip}:{proxy.port}.",
            words.replace("DEPLOYMENT", '"$HERE/deployment.yaml"')]
    return script(description, body)


def readme(plan: LaunchPlan, targets: set[str]) -> str:
    deployment = plan.deployment
    proxy = deployment.proxy
    lines = [f"# {deployment.metadata.name}: how to start it", "",
             f"Rendered by `ascend-pd render` from `deployment.yaml` (cluster `{plan.cluster.name}`, model "
             f"`{deployment.model.path}`, connector `{deployment.connector.implementation}` in {deployment.connector.mode}"
             " mode). Render again after changing deployment.yaml; do not edit these files by hand.", ""]
    if "bash" in targets:
        lines += ["## With the bash launchers", "",
                  "1. Copy this directory to the same path on every node listed below, and the model weights to "
                  f"`{deployment.model.path}`.",
                  "2. On each node, check it first: `ascend-pd preflight --deployment deployment.yaml --node NODE`.",
                  "3. On each node, run its launcher (any order; an instance spread over several nodes waits until "
                  "all of them have started):", ""]
        lines += [f"   - `{node.name}` ({node.network.host_ip}): `bash launch-{node.name}.sh`" for node in plan.nodes]
        lines += ["",
                  f"4. On `{proxy.node}`, start the proxy: `bash launch-proxy.sh`. Clients send OpenAI requests to "
                  f"`http://{plan.proxy_network.host_ip}:{proxy.port}/v1/...` with model "
                  f"`{deployment.served_model_name}`.",
                  "5. Logs are in `logs/<process>.log`, pids in `run/`. `bash stop-NODE.sh` stops a node's processes.",
                  ""]
    if "k8s" in targets:
        lines += ["## On Kubernetes", "",
                  "`kubectl apply -f k8s/` creates a ConfigMap with deployment.yaml and the serve scripts, one "
                  "Deployment per single-node instance, one LeaderWorkerSet per multi-node instance (needs the "
                  "LeaderWorkerSet controller), and the proxy's Deployment and Service. Pods use host networking and "
                  "are pinned to nodes by `kubernetes.io/hostname`, so cluster node names must be Kubernetes node "
                  "names (edit the cluster file, or the nodeSelector, when they differ).", ""]
    if plan.platform != "cpu":
        lines += ["`ranktables/` holds an HCCL rank table per instance for sites whose HCCL setup asks for one; "
                  "Mooncake itself does not need them.", ""]
    lines += ["## Processes", "", "| node | process | what |", "|---|---|---|"]
    for process in plan.processes():
        lines.append(f"| {process.node} | {process.name} | {process_summary(process)} |")
    lines.append(f"| {proxy.node} | proxy | {plan.proxy_network.host_ip}:{proxy.port}, policy {proxy.policy} |")
    return "\n".join(lines) + "\n"


def bash_files(plan: LaunchPlan) -> dict[str, str]:
    files = {f"launch-{node.name}.sh": launch_script(plan, node) for node in plan.nodes}
    nodes = [n.name for n in plan.nodes]
    if plan.deployment.proxy.node not in nodes:
        nodes.append(plan.deployment.proxy.node)
    files.update({f"stop-{name}.sh": stop_script(plan, name) for name in nodes})
    files["launch-proxy.sh"] = proxy_script(plan)
    return files
