"""Every part of the system addresses the same ranks: on the shipped examples and on plans the planner writes, with
node addresses the cluster files do not hold, what render launches, what the proxy routes to and hands D, what
validate checks, what the connector binds and what the rank tables name all equal the one rank layout
(deploy/layout.py), and the layout keeps the port rules docs/design.md states."""

from __future__ import annotations

import random

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ascend_pd.connector.config import parse_config
from ascend_pd.deploy import parse_deployment
from ascend_pd.deploy.layout import EngineRank, engine_ranks
from ascend_pd.deploy.rules.base import Context
from ascend_pd.deploy.rules.ports import port_claims
from ascend_pd.hardware import configs_dir, load_cluster
from ascend_pd.proxy.endpoints import endpoints_from_deployment
from ascend_pd.render import plan_processes, rank_table
from tests import fuzz
from tests.fuzzed_plans import fuzzed_plan

EXAMPLES = configs_dir() / "deployments"
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
PLAN_SEEDS = range(10)


def with_site_addresses(data: dict, rng: random.Random) -> dict[str, str]:
    """Give every node of the deployment's cluster a distinct address in 10/8, none the cluster file's."""
    nodes = [n.name for n in load_cluster(data["cluster"]).nodes]
    picked = rng.sample(range(1, 1 << 24), len(nodes))
    addresses = {node: f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}" for node, n in zip(nodes, picked)}
    data["node_addresses"] = addresses
    return addresses


def check_every_consumer_agrees(data: dict, addresses: dict[str, str]) -> int:
    """Assert the layout's rules and that each consumer agrees with it; the number of ranks checked."""
    loaded = parse_deployment(yaml.safe_dump(data), "deployment.yaml")
    ranks = engine_ranks(loaded)
    check_layout_rules(loaded.deployment, ranks, addresses)
    by_name = {rank.name: rank for rank in ranks}

    # the proxy: every backend and the KV address it hands D
    endpoints = endpoints_from_deployment(loaded)
    assert sorted(e.name for e in endpoints) == sorted(by_name)
    for endpoint in endpoints:
        rank = by_name[endpoint.name]
        kv = endpoint.kv
        assert endpoint.url == f"http://{rank.host}:{rank.http_port}"
        assert (kv.host, kv.port, kv.engine_id, kv.dp_rank, tuple(kv.rank_hosts)) == \
               (rank.host, rank.kv_port, rank.reported_engine_id, rank.dp_rank, rank.rank_hosts)

    # render: the processes, their node's address, and the ports each engine's connector binds
    plan = plan_processes(loaded)
    for node in plan.nodes:
        assert node.network.host_ip == addresses[node.name]
        assert dict(node.env)["VLLM_HOST_IP"] == addresses[node.name]
    for process in plan.processes():
        rank = by_name[f"{process.instance}/dp{process.dp_rank}"]
        assert process.node in {p.node for p in rank.placements}
        if process.node_rank == 0:
            assert process.http_port == rank.http_port
        if process.kv_config is None:
            continue
        assert process.engine_id == rank.reported_engine_id
        assert process.kv_port == rank.kv_port + process.first_worker
        if process.kv_config["kv_connector"] == "AscendPDConnector":
            check_connector_binds_the_layouts_ports(process.kv_config, rank)

    # validate: the ports it checks for clashes
    claimed = {(c.host, c.port) for c in port_claims(Context.build(loaded)) if c.kind in ("http", "kv")}
    laid_out = {(r.host, r.http_port) for r in ranks} | {(h, p) for r in ranks for _, h, p in r.worker_ports()}
    assert claimed == laid_out

    # rank tables: each server is a node at its site address
    for instance in loaded.deployment.instances:
        if plan.platform != "cpu" and loaded.cluster().device(instance.devices[0].node,
                                                              instance.devices[0].devices[0]).device_ip:
            servers = {s["server_id"] for s in rank_table(loaded.cluster(), instance)["server_list"]}
            assert servers == {addresses[p.node] for p in instance.devices}

    # the proxy replicas listen on their nodes' site addresses
    assert [r.network.host_ip for r in plan.proxies] == [addresses[n] for n in loaded.deployment.proxy.nodes]
    return len(ranks)


def check_layout_rules(deployment, ranks: list[EngineRank], addresses: dict[str, str]) -> None:
    """docs/design.md: DP rank d serves HTTP on http_port + d at its leader's node; an instance's workers take
    kv_port .. kv_port + dp*tp*pp - 1, each one port, on the node of its device."""
    for instance in deployment.instances:
        mine = [r for r in ranks if r.instance.name == instance.name]
        assert [r.http_port for r in mine] == [instance.http_port + d for d in range(len(mine))]
        assert [r.host for r in mine] == [addresses[r.placements[0].node] for r in mine]
        ports = [p for r in mine for _, _, p in r.worker_ports()]
        workers = instance.parallel.tp * instance.parallel.pp
        assert sorted(ports) == list(range(instance.kv_port, instance.kv_port + len(mine) * workers))
        for rank in mine:
            device_nodes = [p.node for p in rank.placements for _ in p.devices]
            assert [h for _, h, _ in rank.worker_ports()] == [addresses[n] for n in device_nodes][:workers]


def check_connector_binds_the_layouts_ports(kv_config: dict, rank: EngineRank) -> None:
    """The connector reads the rendered kv_transfer_config as vLLM hands it over and binds, for each TP rank, the
    port the layout gives that worker."""
    config = parse_config(kv_config["kv_role"], kv_config["engine_id"], kv_config["kv_port"],
                          kv_config["kv_connector_extra_config"])
    vllm_dp_rank = rank.dp_rank if rank.external_dp else 0  # a dense DP rank is an engine of DP 1
    bound = [config.side_channel_port(vllm_dp_rank, tp_rank) for tp_rank in range(rank.instance.parallel.tp)]
    assert bound == [p for _, _, p in rank.worker_ports()]
    if rank.role == "prefill":
        assert config.rank_hosts == rank.rank_hosts


@settings(max_examples=fuzz.examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(EXAMPLE_NAMES), seed=st.integers(0, 2**32 - 1))
def test_every_consumer_of_a_shipped_example_uses_the_layouts_addresses_and_ports(name, seed):
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    addresses = with_site_addresses(data, random.Random(seed))
    assert check_every_consumer_agrees(data, addresses) > 0


@pytest.mark.parametrize("seed", PLAN_SEEDS)
def test_every_consumer_of_a_planned_deployment_uses_the_layouts_addresses_and_ports(seed):
    data = fuzzed_plan(seed)
    addresses = with_site_addresses(data, random.Random(seed))
    assert check_every_consumer_agrees(data, addresses) > 0
