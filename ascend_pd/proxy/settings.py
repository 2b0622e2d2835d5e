"""Proxy settings as one frozen value: flow mode, timeouts, limits, retries, health checks, engine load polling,
admin token, and the public port's limits, API keys and TLS."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ascend_pd.defaults import PROXY_POLICY
from ascend_pd.deploy import Deployment
from ascend_pd.proxy.wire.server import ServerLimits

# pull: P first, then D with P's kv_transfer_params. push: P and D together with a shared transfer id (this
# project's connector). layerwise: D first, P when D posts its blocks to /v1/metaserver (vllm-ascend's
# MooncakeLayerwiseConnector). colocated: no handoff.
Mode = Literal["pull", "push", "layerwise", "colocated"]


@dataclass(frozen=True)
class BackendTimeouts:
    """What the proxy waits for a backend, in seconds. Every one is finite: a hung backend costs one request its
    timeout, never hangs it forever."""

    connect: float = 5.0
    read: float = 300.0  # longest silence between two reads from a backend (a long prefill sends nothing)
    total: float = 3600.0
    health: float = 5.0  # a /health or /metrics call; an engine streaming to many clients can take seconds


@dataclass(frozen=True)
class ProxySettings:
    mode: Mode = "pull"
    timeouts: BackendTimeouts = field(default_factory=BackendTimeouts)
    prefill_policy: str = PROXY_POLICY
    decode_policy: str = PROXY_POLICY
    max_inflight: int = 1024
    retry_after_seconds: int = 1
    prefill_attempts: int = 3  # a failed P is retried on another P, before the handoff
    pair_attempts: int = 3  # a D that fails before its first token means a fresh prefill on a new pair
    health_interval: float = 2.0  # 0 turns active health checks off
    engine_load_interval: float = 1.0  # seconds between reads of every engine's /metrics; 0 turns them off
    breaker_failures: int = 3
    breaker_open_seconds: float = 10.0
    handoff_grace: float = 30.0  # how long a D whose client left may run to pull and free P's KV (pull mode)
    admin_token: str | None = field(default=None, repr=False)  # secrets stay out of logs and tracebacks
    admin_port: int | None = None  # the admin endpoints on a listener of their own (None: on the public port)
    admin_host: str = "127.0.0.1"  # where that listener binds: loopback keeps the admin API off the network
    workload_window: float = 60.0  # seconds of finished requests GET /v1/workload summarises
    metaserver_url: str | None = None  # layerwise: where D posts its block coordinates
    backend_table: str | None = None  # file of the backend table: read at start, watched, written on a change
    table_interval: float = 1.0  # seconds between looks at that file
    limits: ServerLimits = field(default_factory=ServerLimits)  # what clients can make the HTTP server hold
    api_keys: tuple[str, ...] = field(default=(), repr=False)  # empty: the OpenAI endpoints are open
    public_detail: bool = False  # /health's backends and /metrics for anyone, not only the admin token's holders
    ssl_certfile: str | None = None  # with ssl_keyfile: HTTPS on the public port
    ssl_keyfile: str | None = None


def mode_for(deployment: Deployment) -> Mode:
    """The request flow the deployment's connector needs, even while it runs colocated instances only: the proxy
    serves those until a prefill and a decode instance join (as the autoscaler adds them), then hands off."""
    connector = deployment.connector
    if connector.mode == "pull":
        return "pull"
    return "layerwise" if connector.layerwise else "push"
