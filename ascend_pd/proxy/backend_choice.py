"""What a proxy serves, decided from its flags: the backends (a deployment file or URLs), the flow, the port, the
routing policy, and in layerwise mode the URL decode instances call back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ascend_pd.defaults import PROXY_POLICY, PROXY_PORT
from ascend_pd.errors import InputError
from ascend_pd.proxy.endpoints import ROLES, Endpoint, endpoint_from_url, endpoints_from_deployment
from ascend_pd.proxy.settings import Mode, mode_for

# Addresses that mean "every interface": fine to listen on, useless as an address another host calls back.
WILDCARDS = ("0.0.0.0", "::", "")
DEFAULT_PORT = PROXY_PORT
DEFAULT_POLICY = PROXY_POLICY


@dataclass(frozen=True)
class BackendChoice:
    endpoints: tuple[Endpoint, ...]
    mode: Mode
    port: int
    policy: str
    advertise_url: str | None = None  # layerwise only: how D instances reach this proxy
    revision: str = "manual"  # of the deployment file the backends come from

    @property
    def metaserver_url(self) -> str | None:
        """Where D posts its block coordinates (layerwise), or None in the other flows."""
        if self.mode != "layerwise":
            return None
        return f"{self.advertise_url.rstrip('/')}/v1/metaserver"

    def role_counts(self) -> str:
        """'1 prefill, 2 decode, 0 colocated': the start-up line's summary."""
        return ", ".join(f"{sum(e.role == role for e in self.endpoints)} {role}" for role in ROLES)


def choose_backends(deployment_file: str | None = None, prefill: Sequence[str] = (), decode: Sequence[str] = (),
                    colocated: Sequence[str] = (), mode: str | None = None, host: str = "0.0.0.0",
                    port: int | None = None, policy: str | None = None,
                    advertise_url: str | None = None) -> BackendChoice:
    """Backends from a deployment file or from URLs (not both); flags given explicitly win over the file."""
    urls = [(u, "prefill", "--prefill") for u in prefill] + [(u, "decode", "--decode") for u in decode] + \
           [(u, "colocated", "--colocated") for u in colocated]
    if deployment_file and urls:
        raise InputError("give backends either with --deployment or with URLs, not both", field="--deployment",
                         fix="drop --prefill/--decode/--colocated, or drop --deployment")
    if deployment_file:
        choice = _from_deployment(deployment_file, mode, port, policy, advertise_url)
    elif urls:
        choice = _from_urls(urls, mode, port, policy, advertise_url)
    else:
        raise InputError("no backends given", field="--deployment",
                         fix="pass --deployment deployment.yaml, or --prefill URL --decode URL")
    if choice.mode == "layerwise" and choice.advertise_url is None:
        choice = replace(choice, advertise_url=_listening_url(host, choice.port))
    return choice


def _from_deployment(path: str, mode: str | None, port: int | None, policy: str | None,
                     advertise_url: str | None) -> BackendChoice:
    if mode:
        raise InputError("the flow comes from the deployment's connector settings", field="--mode",
                         fix="drop --mode, or change connector.mode in the deployment")
    from ascend_pd.deploy import load_deployment, revision_of

    loaded = load_deployment(path)
    endpoints = tuple(endpoints_from_deployment(loaded))
    flow = mode_for(loaded.deployment)
    port = port if port is not None else loaded.deployment.proxy.port
    if flow == "layerwise" and advertise_url is None:
        # D instances call back the proxy's node as the cluster names it, not whatever address it listens on
        node = loaded.cluster().require_node(loaded.deployment.proxy.node, file=loaded.source, field="proxy.node",
                                             line=loaded.lines.get(("proxy", "node")),
                                             otherwise="pass --advertise-url")
        advertise_url = f"http://{node.host_ip}:{port}"
    return BackendChoice(endpoints, flow, port, policy or loaded.deployment.proxy.policy or DEFAULT_POLICY,
                         advertise_url, revision_of(loaded.deployment))


def _from_urls(urls: list[tuple[str, str, str]], mode: str | None, port: int | None, policy: str | None,
               advertise_url: str | None) -> BackendChoice:
    endpoints = tuple(endpoint_from_url(url, role, flag) for url, role, flag in urls)
    has_pair = any(role == "prefill" for _, role, _ in urls) and any(role == "decode" for _, role, _ in urls)
    if not has_pair and not any(role == "colocated" for _, role, _ in urls):
        raise InputError("a PD proxy needs at least one --prefill and one --decode", field="--decode",
                         fix="add --prefill URL and --decode URL (or --colocated URL)")
    flow = (mode or "pull") if has_pair else "colocated"
    return BackendChoice(endpoints, flow, port if port is not None else DEFAULT_PORT, policy or DEFAULT_POLICY,
                         advertise_url)


def _listening_url(host: str, port: int) -> str:
    if host in WILDCARDS:
        raise InputError(f"D instances must call this proxy back, and {host or 'the wildcard'} is not an "
                         "address they can reach", field="--advertise-url",
                         fix="pass --advertise-url http://<proxy ip>:<port>, or --host <proxy ip>")
    return f"http://{host}:{port}"
