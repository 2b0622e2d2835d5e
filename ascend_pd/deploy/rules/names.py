"""The rule that names are safe where render writes them: in shell comments and commands, in file names
(launch-<node>.sh) and in Kubernetes object names and label values. A newline would end a comment and start a
command; a '/' would put a launcher in another directory; Kubernetes refuses a name longer than 63 characters."""

from __future__ import annotations

import re
from typing import Iterator

from ascend_pd.deploy.diagnostics import Diagnostic
from ascend_pd.deploy.rules.base import Context, rule
from ascend_pd.hardware.node_names import K8S_NAME_MAX, LABEL_VALUE, LABEL_VALUE_RULE, unsafe_character
from ascend_pd.yamlfile import Loc

# An RFC 1035 label: the deployment's name starts the names of its Kubernetes objects, its proxy Service among them.
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_RULE = "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
# A Linux network interface name, as render prints it in comments and exports it for HCCL and Gloo.
INTERFACE = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.:@]*")
INTERFACE_RULE = "letters, digits, '-', '_', '.', ':' and '@', starting with a letter or digit"

# The suffixes render puts after metadata.name in object names (render/k8s.py), besides each instance's name.
OBJECT_SUFFIXES = ("config", "backends", "secrets", "proxy")


def _refused(ctx: Context, loc: Loc, what: str, value: str, pattern: re.Pattern[str],
             allowed: str) -> Diagnostic | None:
    bad = unsafe_character(value, pattern)
    if bad is None:
        return None
    return ctx.diag("APD305", "error", loc, f"{what} {value!r} has {bad}, which is not safe in a shell comment, a "
                                            "file name or a Kubernetes name", f"rename it: use only {allowed}")


def _too_long(ctx: Context, loc: Loc, what: str, name: str, hint: str) -> Diagnostic | None:
    if len(name) <= K8S_NAME_MAX:
        return None
    return ctx.diag("APD305", "error", loc, f"{what} makes the Kubernetes name '{name}', {len(name)} characters; "
                                            f"Kubernetes allows {K8S_NAME_MAX}", hint)


def _node_names(ctx: Context) -> Iterator[tuple[Loc, str]]:
    deployment = ctx.deployment
    for i, instance in enumerate(deployment.instances):
        for j, placement in enumerate(instance.devices):
            yield ("instances", i, "devices", j, "node"), placement.node
    yield ("proxy", "node"), deployment.proxy.node
    for k, node in enumerate(deployment.proxy.extra_nodes):
        yield ("proxy", "extra_nodes", k), node
    for node in deployment.node_addresses or {}:
        yield ("node_addresses", node), node


def _findings(ctx: Context) -> Iterator[Diagnostic | None]:
    deployment = ctx.deployment
    name = deployment.metadata.name
    yield _refused(ctx, ("metadata", "name"), "metadata.name", name, DNS_LABEL, DNS_LABEL_RULE)
    longest = max([*OBJECT_SUFFIXES, *(i.name for i in deployment.instances)], key=len)
    yield _too_long(ctx, ("metadata", "name"), "metadata.name", f"{name}-{longest}",
                    f"shorten metadata.name (or the instance name '{longest}')")
    for i, instance in enumerate(deployment.instances):
        yield _refused(ctx, ("instances", i, "name"), "instance name", instance.name, DNS_LABEL, DNS_LABEL_RULE)
        if instance.engine_id is not None:
            yield _refused(ctx, ("instances", i, "engine_id"), "engine_id", instance.engine_id, LABEL_VALUE,
                           LABEL_VALUE_RULE)
    checked: set[str] = set()
    for loc, node in _node_names(ctx):
        if node in checked:
            continue
        checked.add(node)
        finding = (_refused(ctx, loc, "node name", node, LABEL_VALUE, LABEL_VALUE_RULE)
                   or _too_long(ctx, loc, "node name", node, f"rename the node: use only {LABEL_VALUE_RULE}"))
        if finding is None and ctx.cluster.has_node(node):
            interface = ctx.cluster.node(node).interface
            finding = _refused(ctx, ("cluster",), f"the interface of node '{node}' in the cluster file",
                               interface, INTERFACE, INTERFACE_RULE)
        yield finding


@rule("APD305", "a name that is not safe in a shell comment, a file name or a Kubernetes name")
def safe_names(ctx: Context) -> Iterator[Diagnostic]:
    yield from (finding for finding in _findings(ctx) if finding is not None)
