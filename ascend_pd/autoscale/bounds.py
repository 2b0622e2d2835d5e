"""The limits an operator puts on the closed loop: fewest and most instances per role, and the most devices the
deployment may take; and the smallest deployment an idle one shrinks to."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ascend_pd.deploy.schema import Deployment, VllmArgs
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.planner.resize import RoleShape, Step, counts_of, resize, shape_of

ROLES = ("prefill", "decode", "colocated")


@dataclass(frozen=True)
class Bounds:
    minimum: dict[str, int] = field(default_factory=dict)  # role -> fewest instances; 1 for a role not named
    maximum: dict[str, int] = field(default_factory=dict)  # role -> most instances; no limit for a role not named
    max_devices: int | None = None

    def fewest(self, role: str) -> int:
        return self.minimum.get(role, 1)

    def most(self, role: str) -> int | None:
        return self.maximum.get(role)


def parse_role_counts(values: tuple[str, ...], option: str) -> dict[str, int]:
    """'prefill=2' words of a repeatable option as {role: count}; InputError naming the option."""
    counts = {}
    for value in values:
        role, _, number = value.partition("=")
        if role not in ROLES or not number.isdigit():
            raise InputError(f"'{value}' is not ROLE=COUNT", field=option,
                             fix=f"write it as {option} decode=4 (roles: {', '.join(ROLES)})")
        counts[role] = int(number)
    return counts


def check_bounds(bounds: Bounds) -> None:
    for role, fewest in bounds.minimum.items():
        if fewest < 1:
            raise InputError(f"at least {fewest} {role} instances: the proxy would have nothing to wake",
                             field="--min-instances", fix=f"give {role}=1 or more (an idle deployment shrinks to it)")
    for role, most in bounds.maximum.items():
        if most < bounds.fewest(role):
            raise InputError(f"at most {most} {role} instances, but at least {bounds.fewest(role)}",
                             field="--max-instances", fix=f"raise --max-instances {role}= or lower --min-instances")


def _by_role(counts: Counter[RoleShape]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for (role, _), n in counts.items():
        totals[role] += n
    return totals


def clamp(counts: Counter[RoleShape], bounds: Bounds) -> Counter[RoleShape]:
    """`counts` with each role's total held within its bounds: instances go from, or come to, the role's most
    common shape."""
    clamped = Counter(counts)
    for role, total in _by_role(counts).items():
        keys = sorted((k for k in clamped if k[0] == role), key=lambda k: -clamped[k])
        most, fewest = bounds.most(role), bounds.fewest(role)
        while most is not None and total > most:
            biggest = max(keys, key=lambda k: clamped[k])
            clamped[biggest] -= 1
            total -= 1
        if total < fewest:
            clamped[keys[0]] += fewest - total
    return +clamped


def within(counts: Counter[RoleShape], bounds: Bounds) -> bool:
    return clamp(counts, bounds) == +counts


def minimum(deployment: Deployment, bounds: Bounds) -> Counter[RoleShape]:
    """The fewest instances each role of `deployment` may have, each in the role's most common shape."""
    fewest: Counter[RoleShape] = Counter()
    for role in ROLES:
        shapes = Counter(shape_of(i) for i in deployment.by_role(role))
        if shapes:
            fewest[(role, shapes.most_common(1)[0][0])] = bounds.fewest(role)
    return fewest


def resize_to(deployment: Deployment, cluster: Cluster, counts: Counter[RoleShape],
              *known: Deployment) -> tuple[Deployment, list[Step]] | None:
    """`deployment` moved to `counts` (engine arguments from instances of the same role and shape in `deployment`
    or `known`), or None when it has them already."""
    if counts == counts_of(deployment):
        return None
    vllm: dict[RoleShape, VllmArgs] = {}
    for source in (*known, deployment):
        vllm.update({(i.role, shape_of(i)): i.vllm for i in source.instances})
    return resize(deployment, cluster, counts, vllm, flips=False)
