"""The rule registry and the context every rule reads: the deployment, its cluster, its model, line numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

from ascend_pd.deploy.diagnostics import Diagnostic, Severity
from ascend_pd.deploy.io import LoadedDeployment
from ascend_pd.deploy.layout import EngineRank, instance_ranks, places_on
from ascend_pd.deploy.schema import Deployment
from ascend_pd.errors import InputError
from ascend_pd.hardware import Cluster
from ascend_pd.models import ModelSpec, get_model
from ascend_pd.yamlfile import Loc, dotted, nearest_line

T = TypeVar("T")


@dataclass
class Context:
    deployment: Deployment
    cluster: Cluster
    model: ModelSpec | None  # None when model.name is a path that does not exist on this machine
    lines: dict[Loc, int]
    source: str
    _derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def derived(self, name: str, compute: Callable[["Context"], T]) -> T:
        """A fact several rules read (every port claim, say), computed once per context: on a SuperCluster each
        costs a pass over thousands of instances."""
        if name not in self._derived:
            self._derived[name] = compute(self)
        return self._derived[name]

    @classmethod
    def build(cls, loaded: LoadedDeployment) -> "Context":
        try:
            cluster = loaded.cluster()
        except InputError as exc:
            if exc.field and exc.field.startswith("node_addresses."):
                raise  # already names the deployment's own field and line
            exc.file = exc.file or loaded.source
            exc.line = exc.line or nearest_line(loaded.lines, ("cluster",))
            raise InputError(exc.message, file=exc.file, field="cluster", line=exc.line, fix=exc.fix) from None
        try:
            model = get_model(loaded.deployment.model.name)
        except InputError:
            model = None
        return cls(loaded.deployment, cluster, model, loaded.lines, loaded.source)

    def placed_ranks(self) -> list[EngineRank]:
        """The rank layout of every instance whose nodes the cluster has (APD101 reports the others), computed once
        for the rules that read it."""
        return self.derived("placed_ranks", _placed_ranks)

    def diag(self, code: str, severity: Severity, loc: Loc, message: str, hint: str) -> Diagnostic:
        return Diagnostic(code=code, severity=severity, path=dotted(loc) or "<top>", message=message, hint=hint,
                          line=nearest_line(self.lines, loc))


def _placed_ranks(ctx: Context) -> list[EngineRank]:
    moe = bool(ctx.model and ctx.model.is_moe)
    return [rank for i, inst in enumerate(ctx.deployment.instances) if places_on(inst, ctx.cluster)
            for rank in instance_ranks(inst, i, ctx.cluster, moe)]


RuleFn = Callable[[Context], Iterator[Diagnostic]]
RULES: list[RuleFn] = []
CODES: dict[str, str] = {}  # code -> one-line summary, for the README and `validate --list-rules`


def rule(code: str, summary: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        if code in CODES:
            raise RuntimeError(f"rule code {code} registered twice")
        CODES[code] = summary
        RULES.append(fn)
        return fn
    return register
