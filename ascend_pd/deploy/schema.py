"""The Deployment contract (deployment.yaml): pydantic models with docs/design.md's keys that reject unknown ones."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ascend_pd.defaults import (GPU_MEMORY_UTILIZATION, PREFILL_BATCH_TOKENS, PROXY_POLICY, PROXY_PORT, SLO_ATTAINMENT,
                                VLLM_ASCEND_RELEASE)
from ascend_pd.errors import InputError
from ascend_pd.perf.engine_version import engine_version

Role = Literal["prefill", "decode", "colocated"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Metadata(_Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                      description="DNS-1123 label: lower-case letters, digits and '-' (used in Kubernetes names)")
    labels: dict[str, str] = Field(default_factory=dict)


class ModelRef(_Strict):
    name: str = Field(min_length=1, description="catalog id, or a directory holding config.json")
    quantization: Literal["bf16", "w8a8", "w4a8"] = "bf16"
    kv_cache_dtype: Literal["bf16", "int8"] = "bf16"
    path: str = Field(min_length=1, description="where the weights are on the serving nodes")
    served_name: str | None = Field(None, description="model name clients send; defaults to metadata.name")


class Connector(_Strict):
    implementation: Literal["ascend-pd", "vllm-ascend"] = "ascend-pd"
    mode: Literal["pull", "push"] = "pull"
    protocol: Literal["ascend", "tcp", "rdma"] = "ascend"

    @property
    def layerwise(self) -> bool:
        """vllm-ascend's MooncakeLayerwiseConnector: the proxy sends D each request first, and D posts its block
        coordinates back to the proxy's metaserver over HTTP."""
        return self.implementation == "vllm-ascend" and self.mode == "push"


class LengthDistribution(_Strict):
    """Token counts of a workload. `mean` always; the shape is fixed unless a distribution is named."""

    mean: float = Field(gt=0)
    p99: float | None = Field(None, gt=0)
    std: float | None = Field(None, ge=0)
    distribution: Literal["fixed", "normal", "lognormal"] = "fixed"
    min: int | None = Field(None, ge=1)
    max: int | None = Field(None, ge=1)


class Workload(_Strict):
    input_tokens: LengthDistribution
    output_tokens: LengthDistribution
    rate: float = Field(gt=0, description="requests per second arriving at the proxy")
    trace: str | None = Field(None, description="JSONL of {input_tokens, output_tokens}; overrides the lengths")


class SLO(_Strict):
    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)
    attainment: float = Field(SLO_ATTAINMENT, gt=0, le=1)


class Parallel(_Strict):
    tp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    ep: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)


class DevicePlacement(_Strict):
    """Where one DP rank runs: its tp*pp devices on one node. A rank whose TP group spans nodes (TP over the
    SuperPoD's UB fabric) is written as several entries that carry the same `dp_rank`; the first is its leader."""

    node: str = Field(min_length=1)
    devices: list[int] = Field(min_length=1)
    dp_rank: int | None = Field(None, ge=0, description="only for a DP rank that spans nodes")

    @field_validator("devices")
    @classmethod
    def _non_negative(cls, devices: list[int]) -> list[int]:
        if any(d < 0 for d in devices):
            raise ValueError("device ids are 0 or more")
        return devices


class VllmArgs(_Strict):
    max_model_len: int = Field(32768, ge=16)
    max_num_batched_tokens: int = Field(PREFILL_BATCH_TOKENS, ge=1)
    max_num_seqs: int = Field(16, ge=1)
    gpu_memory_utilization: float = Field(GPU_MEMORY_UTILIZATION, gt=0, le=1)
    block_size: int = Field(128, ge=1)
    enforce_eager: bool | None = Field(
        None, description="true: --enforce-eager; false: vLLM's graph mode; unset: the platform's choice for the role")
    compilation_config: dict[str, Any] | None = Field(
        None, description="vLLM --compilation-config; unset: the platform's choice for the role")
    enable_prefix_caching: bool | None = Field(
        None, description="vLLM --[no-]enable-prefix-caching; unset: the choice of the platform and connector")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="vLLM --dtype of weights, activations and KV; memory checks assume model.quantization")
    extra_args: list[str] = Field(default_factory=list, description="passed to `vllm serve` verbatim")


class Instance(_Strict):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    role: Role
    parallel: Parallel = Field(default_factory=Parallel)
    devices: list[DevicePlacement] = Field(min_length=1)
    http_port: int = Field(ge=1, le=65535)
    kv_port: int = Field(ge=1, le=65535)
    engine_id: str | None = Field(None, min_length=1, description="defaults to the instance name")
    vllm: VllmArgs = Field(default_factory=VllmArgs)

    @property
    def effective_engine_id(self) -> str:
        return self.engine_id or self.name

    @property
    def device_count(self) -> int:
        return sum(len(p.devices) for p in self.devices)

    def rank_groups(self) -> list[list[DevicePlacement]]:
        """The placements of each DP rank, in rank order: one entry per rank unless entries share a dp_rank."""
        if all(p.dp_rank is None for p in self.devices):
            return [[p] for p in self.devices]
        groups: dict[int, list[DevicePlacement]] = {}
        for index, placement in enumerate(self.devices):
            groups.setdefault(placement.dp_rank if placement.dp_rank is not None else -1 - index, []).append(placement)
        return [groups[key] for key in sorted(groups, key=lambda k: (k < 0, abs(k)))]

    @property
    def kv_port_count(self) -> int:
        """Side-channel ports kv_port .. kv_port + dp*tp*pp - 1, one per worker."""
        return self.parallel.dp * self.parallel.tp * self.parallel.pp

    def endpoints(self) -> list[tuple[int, DevicePlacement, int]]:
        """(dp_rank, leader placement, http_port) for each DP rank; DP rank i serves on http_port + i on the node of
        its leader (its first placement)."""
        return [(rank, group[0], self.http_port + rank) for rank, group in enumerate(self.rank_groups())]


class Proxy(_Strict):
    node: str = Field(min_length=1, description="node of the first proxy replica")
    port: int = Field(PROXY_PORT, ge=1, le=65535, description="port every replica listens on, on its node")
    policy: Literal["least-loaded", "round-robin", "prefix-affinity", "random"] = PROXY_POLICY
    workers: int | None = Field(
        None, ge=1, description="event-loop processes of each replica, sharing its port (`ascend-pd proxy "
                                "--workers`); unset: one per core available to the proxy on its node")
    extra_nodes: list[str] = Field(
        default_factory=list,
        description="more nodes that each run one more replica of the proxy on the same port, in front of the same "
                    "backends; clients or an external load balancer spread requests over the replicas, and each "
                    "routes by its own requests in flight and the load the engines report on /metrics")

    @property
    def nodes(self) -> list[str]:
        """Every node that runs a replica, proxy.node first."""
        return [self.node, *self.extra_nodes]


class Deployment(_Strict):
    apiVersion: Literal["ascend-pd/v1"] = "ascend-pd/v1"
    kind: Literal["Deployment"] = "Deployment"
    metadata: Metadata
    cluster: str = Field(min_length=1, description="a shipped cluster name, or a path to a cluster YAML file")
    model: ModelRef
    connector: Connector = Field(default_factory=Connector)
    workload: Workload | None = None
    slo: SLO | None = None
    instances: list[Instance] = Field(min_length=1)
    proxy: Proxy
    vllm_ascend_version: str | None = Field(
        None, description=f"the vllm-ascend release the engines run: what plan, simulate and the autoscaler price and "
                          f"render's default image holds (absent: {VLLM_ASCEND_RELEASE}, the release ascend-pd pins)")
    node_addresses: dict[str, IPv4Address] | None = Field(
        None, description="node name -> the host address it has at this site, where it differs from the cluster "
                          "file's host_ip_start numbering; every engine, the proxy and the autoscaler reach the node "
                          "there (`ascend-pd render --node-ip NODE=IP` writes it into the bundle)")

    @field_validator("vllm_ascend_version")
    @classmethod
    def _release(cls, text: str | None) -> str | None:
        if text is None:
            return None
        try:
            return str(engine_version(text, "vllm_ascend_version"))
        except InputError as exc:  # pydantic reports a ValueError at the key's file and line
            raise ValueError(f"{exc.message}; {exc.fix}") from None

    def by_role(self, role: str) -> list[Instance]:
        return [i for i in self.instances if i.role == role]

    @property
    def served_model_name(self) -> str:
        return self.model.served_name or self.metadata.name
