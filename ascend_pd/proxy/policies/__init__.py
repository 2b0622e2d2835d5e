"""Routing policies, one per module, chosen by name."""

from __future__ import annotations

from ascend_pd.errors import InputError
from ascend_pd.proxy.policies.base import Policy, RouteRequest
from ascend_pd.proxy.policies.least_loaded import LeastLoaded
from ascend_pd.proxy.policies.prefix_affinity import PrefixAffinity
from ascend_pd.proxy.policies.random_choice import RandomChoice
from ascend_pd.proxy.policies.round_robin import RoundRobin

POLICIES = {cls.name: cls for cls in (LeastLoaded, RoundRobin, RandomChoice, PrefixAffinity)}


def make_policy(name: str, field: str = "policy") -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise InputError(f"unknown routing policy '{name}'", field=field,
                         fix=f"use one of: {', '.join(POLICIES)}") from None


__all__ = ["POLICIES", "Policy", "RouteRequest", "make_policy"]
