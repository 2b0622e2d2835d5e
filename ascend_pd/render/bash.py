"""The bash target: launch-<node>.sh and stop-<node>.sh for every node, launch-proxy.sh on proxy.node and
launch-proxy-<node>.sh on each node of proxy.extra_nodes, and a README for DIR."""

from __future__ import annotations

from ascend_pd.deploy.secrets import ADMIN_TOKEN, ADMIN_TOKEN_FILE_ENV, KV_SECRET, KV_SECRET_ENV
from ascend_pd.render.processes import LaunchPlan, NodePlan, ProxyReplica
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


def secret_exports(secrets: dict[str, str]) -> list[str]:
    """Point the processes at the bundle's secret files (env var -> path in the bundle): the secrets themselves never
    reach a command line. A bundle copied without its secrets/ stops here, saying so."""
    lines = ["# The deployment's secrets (render made them; they travel with this directory, never in a command)."]
    for variable, relative in secrets.items():
        lines += [f'export {variable}="$HERE/{relative}"',
                  f'[[ -r "${variable}" ]] || {{ echo "${variable} is missing: copy the whole bundle, secrets/ '
                  'included" >&2; exit 1; }']
    return lines


ENGINE_SECRETS = {KV_SECRET_ENV: KV_SECRET}
PROXY_SECRETS = {ADMIN_TOKEN_FILE_ENV: ADMIN_TOKEN}  # the metaserver checks D with a token of each request's own


def launch_script(plan: LaunchPlan, node: NodePlan) -> str:
    description = [f"Start every serving process of deployment '{plan.deployment.metadata.name}' on node {node.name}, "
                   "or only the processes named as arguments.",
                   "Processes run in the background; logs go to $LOG_DIR (default: logs/ beside this script)."]
    body = ['ONLY="$*"', "", *secret_exports(ENGINE_SECRETS), "", *node_section(plan, node, node.processes)]
    return script(description, body)


def _stop_description(plan: LaunchPlan, node_name: str, replicas: list[ProxyReplica]) -> list[str]:
    if not plan.processes_on(node_name):
        return [f"Stop the proxy that {r.script} started on {node_name}." for r in replicas]
    first = plan.deployment.proxy.node
    return ([f"Stop what launch-{node_name}.sh (and launch-proxy.sh, on the proxy node) started on {node_name}."] +
            [f"It also stops the proxy replica {r.script} started." for r in replicas if r.node != first])


def stop_script(plan: LaunchPlan, node_name: str) -> str:
    replicas = [r for r in plan.proxies if r.node == node_name]
    names = [p.name for p in plan.processes_on(node_name)] + [r.name for r in replicas]
    body = [STOP_BODY, "if (( $# )); then", '  stop "$@"', "else", "  stop " + " ".join(quote(n) for n in names),
            "fi"]
    description = [*_stop_description(plan, node_name, replicas), "With process names as arguments, only those."]
    return script(description, body)


# The backend table's file in the bundle: each proxy replica's --backend-table, which `ascend-pd autoscale` writes
BACKEND_TABLE_FILE = "backends.json"


def proxy_argv(plan: LaunchPlan, deployment_path: str, host: str, advertise_url: str | None,
               table_path: str) -> list[str]:
    proxy = plan.deployment.proxy
    argv = ["ascend-pd", "proxy", "--deployment", deployment_path, "--backend-table", table_path, "--host", host,
            "--port", str(proxy.port)]
    if proxy.workers is not None:
        argv += ["--workers", str(proxy.workers)]
    if advertise_url is not None:
        argv += ["--advertise-url", advertise_url]
    return argv


def proxy_script(plan: LaunchPlan, replica: ProxyReplica) -> str:
    proxy = plan.deployment.proxy
    description = [f"Start the ascend-pd proxy of deployment '{plan.deployment.metadata.name}' on node {replica.node}; "
                   "it reads its backends from deployment.yaml."]
    if len(plan.proxies) > 1:
        description.append(f"It is one of {len(plan.proxies)} replicas in front of the same backends (README.md).")
    argv = proxy_argv(plan, "DEPLOYMENT", replica.network.host_ip, replica.advertise_url, "TABLE")
    words = " ".join(quote(w) for w in ["start", replica.name, *argv])
    body = [*secret_exports(PROXY_SECRETS), "",
            f"# The proxy listens on {replica.network.host_ip}:{proxy.port}. The backend table holds the changes made",
            "# since the deployment file was written (ascend-pd autoscale, the admin API); a restart keeps them.",
            words.replace("DEPLOYMENT", '"$HERE/deployment.yaml"').replace("TABLE", f'"$HERE/{BACKEND_TABLE_FILE}"')]
    return script(description, body)


def _workers_phrase(workers: int | None) -> str:
    if workers is None:
        return "one worker process per core available to it"
    return f"{workers} worker process{'es' if workers > 1 else ''}"


def _on_nodes(nodes: list[str]) -> str:
    names = ", ".join(f"`{node}`" for node in nodes)
    return f"on each of {names}" if len(nodes) > 1 else f"on {names}"


def _proxy_steps(plan: LaunchPlan) -> list[str]:
    """Step 4 of the bash README: where each proxy replica starts, and where clients send requests."""
    deployment = plan.deployment
    proxy = deployment.proxy
    workers = _workers_phrase(proxy.workers)
    model = deployment.served_model_name
    if len(plan.proxies) == 1:
        head = f"4. Start the proxy, which runs {workers}, all on one port:"
        tail = (f"   Clients send OpenAI requests to `http://{plan.proxies[0].network.host_ip}:{proxy.port}/v1/...` "
                f"with model `{model}`.")
    else:
        head = (f"4. Start the proxy's {len(plan.proxies)} replicas, one per node below; each fronts every instance "
                f"and runs {workers} on one port:")
        tail = (f"   Clients, or a load balancer in front of the replicas, spread OpenAI requests with model `{model}` "
                f"over their `http://<address>/v1/...`; each replica routes by its own requests in flight and the "
                "load the engines report on /metrics.")
    replicas = [f"   - `{r.node}` ({r.network.host_ip}:{proxy.port}): `bash {r.script}`" for r in plan.proxies]
    return [head, "", *replicas, "", tail]


def readme(plan: LaunchPlan, targets: set[str]) -> str:
    deployment = plan.deployment
    proxy = deployment.proxy
    lines = [f"# {deployment.metadata.name}: how to start it", "",
             f"Rendered by `ascend-pd render` from `deployment.yaml` (cluster `{plan.cluster.name}`, model "
             f"`{deployment.model.path}`, connector `{deployment.connector.implementation}` in "
             f"{deployment.connector.mode} mode). Render again after changing deployment.yaml; do not edit these "
             "files by hand.", "",
             "`secrets/` holds the deployment's secrets, readable by their owner only: `kv.key`, which every "
             "engine's KV connector holds to know the others, and `admin.token`, the proxy's admin "
             "token that `ascend-pd autoscale` and `ascend-pd replan` read from here. They are not in any command "
             "line: the launchers point the processes at the files. Copy them with the rest of this directory, keep "
             "them out of version control (`secrets/.gitignore` does), and render again into this same directory, "
             "which keeps them: a running engine and a new one must hold the same secrets.", ""]
    if "bash" in targets:
        lines += ["## With the bash launchers", "",
                  "1. Copy this directory to the same path on every node listed below, and the model weights to "
                  f"`{deployment.model.path}`.",
                  "2. On each node, check it first: `ascend-pd preflight --deployment deployment.yaml --node NODE`.",
                  "3. On each node, run its launcher (any order; an instance spread over several nodes waits until "
                  "all of them have started):", ""]
        lines += [f"   - `{node.name}` ({node.network.host_ip}): `bash launch-{node.name}.sh`" for node in plan.nodes]
        lines += ["", *_proxy_steps(plan), "",
                  "5. Logs are in `logs/<process>.log`, pids in `run/`. `bash stop-NODE.sh` stops a node's processes.",
                  ""]
    if "k8s" in targets:
        lines += ["## On Kubernetes", "",
                  "`kubectl apply -f k8s/` creates a ConfigMap with deployment.yaml and the serve scripts, one "
                  "Deployment per single-node instance, one LeaderWorkerSet per multi-node instance (needs the "
                  f"LeaderWorkerSet controller), and the proxy's Deployment (one replica {_on_nodes(proxy.nodes)}, "
                  f"with {_workers_phrase(proxy.workers)}) and a Service in front of its replicas, and "
                  "(`k8s/secrets.yaml`, as private as `secrets/`) a Secret holding the deployment's secrets: engine "
                  "pods mount `kv.key`, proxy pods `admin.token`, read-only for their user. Pods use host "
                  "networking and are pinned to nodes by `kubernetes.io/hostname`, so cluster node names must be "
                  "Kubernetes node names (edit the cluster file, or the nodeSelector, when they differ).", ""]
    if plan.platform != "cpu":
        lines += ["`ranktables/` holds an HCCL rank table per instance for sites whose HCCL setup asks for one; "
                  "Mooncake itself does not need them.", ""]
    lines += ["## Processes", "", "| node | process | what |", "|---|---|---|"]
    for process in plan.processes():
        lines.append(f"| {process.node} | {process.name} | {process_summary(process)} |")
    lines += [f"| {r.node} | {r.name} | {r.network.host_ip}:{proxy.port}, policy {proxy.policy}, "
              f"{_workers_phrase(proxy.workers)} |" for r in plan.proxies]
    return "\n".join(lines) + "\n"


def bash_files(plan: LaunchPlan) -> dict[str, str]:
    files = {f"launch-{node.name}.sh": launch_script(plan, node) for node in plan.nodes}
    nodes = [n.name for n in plan.nodes]
    nodes += [r.node for r in plan.proxies if r.node not in nodes]
    files.update({f"stop-{name}.sh": stop_script(plan, name) for name in nodes})
    files.update({r.script: proxy_script(plan, r) for r in plan.proxies})
    return files
