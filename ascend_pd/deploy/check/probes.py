"""One engine rank and one proxy replica probed: reachable and healthy, serving the model, vLLM's version against
the pin, and the role the proxy routes the engine as."""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.deploy.check.pins import Pin
from ascend_pd.deploy.check.report import Row
from ascend_pd.deploy.http_calls import Unreachable, call
from ascend_pd.deploy.layout import EngineRank

IN_SERVICE = ("closed", "half-open")  # breaker states the proxy routes to; "open" and "draining" it does not


@dataclass(frozen=True)
class ProxyView:
    """The backends one proxy replica routes to, from its /health, which lists them to the admin token's holders."""

    replica: str
    backends: dict[str, tuple[str, str]]  # url -> (role, state)


def check_proxy(node: str, url: str, timeout: float, admin_token: str | None) -> tuple[Row, ProxyView | None]:
    """The replica's row, and its view of the backends when it showed them."""
    name, address = f"proxy@{node}", url.removeprefix("http://")
    try:
        answer = call(url + "/health", timeout, token=admin_token)
    except Unreachable as exc:
        return Row(name, "proxy", address, "failed", "-", f"/health: {exc}", False), None
    body = answer.json()
    body = body if isinstance(body, dict) else {}
    if answer.status != 200:
        detail = f"/health answered {answer.status}" + (f" ({body['status']})" if "status" in body else "")
        return Row(name, "proxy", address, "failed", "-", detail, False), None
    mode = f"mode {body.get('mode', '?')}"
    backends = body.get("backends")
    if not isinstance(backends, list):
        return Row(name, "proxy", address, "ok", "-", f"{mode}; backends not shown (no admin token)", True), None
    view = ProxyView(name, {b["url"]: (b.get("role", "?"), b.get("state", "?")) for b in backends
                            if isinstance(b, dict) and isinstance(b.get("url"), str)})
    serving = sum(state in IN_SERVICE for _, state in view.backends.values())
    return Row(name, "proxy", address, "ok", "-", f"{mode}; {serving} of {len(view.backends)} backends in service",
               True), view


def check_engine(rank: EngineRank, model: str, pin: Pin | None, timeout: float, view: ProxyView | None) -> Row:
    """The rank's row: /health first; an engine that does not answer it is not asked more."""
    address = f"{rank.host}:{rank.http_port}"
    try:
        health = call(rank.url + "/health", timeout)
    except Unreachable as exc:
        return Row(rank.name, rank.role, address, "failed", "-", f"/health: {exc}", False)
    if health.status != 200:
        return Row(rank.name, rank.role, address, "failed", "-", f"/health answered {health.status}", False)
    version, version_problem = _version(rank.url, pin, timeout)
    problems = [p for p in (_model_problem(rank.url, model, timeout), version_problem,
                            _role_problem(rank, view)) if p]
    if problems:
        return Row(rank.name, rank.role, address, "ok", version, "; ".join(problems), False)
    routed = (f"routed as {rank.role} by {view.replica}" if view is not None
              else "role not confirmed: the proxy lists its backends to the admin token's holders only")
    return Row(rank.name, rank.role, address, "ok", version, f"serves {model}; {routed}", True)


def _model_problem(url: str, model: str, timeout: float) -> str | None:
    try:
        answer = call(url + "/v1/models", timeout)
    except Unreachable as exc:
        return f"/v1/models: {exc}"
    body = answer.json()
    if answer.status != 200 or not isinstance(body, dict):
        return f"/v1/models answered {answer.status}"
    data = body.get("data")
    served = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    return None if model in served else f"serves {', '.join(map(str, served)) or 'no model'}, not {model}"


def _version(url: str, pin: Pin | None, timeout: float) -> tuple[str, str | None]:
    """vLLM's version as /version gives it ("?" when it does not), and what is wrong with it."""
    try:
        answer = call(url + "/version", timeout)
    except Unreachable as exc:
        return "?", f"/version: {exc}"
    body = answer.json()
    version = body.get("version") if answer.status == 200 and isinstance(body, dict) else None
    if not isinstance(version, str):
        return "?", f"/version answered {answer.status} without a version"
    if pin is None:
        return version, "no pinned version to compare with (ascend-pd is not installed as a package)"
    return version, None if pin.admits(version) else f"vLLM {version} is outside {pin.describe()}"


def _role_problem(rank: EngineRank, view: ProxyView | None) -> str | None:
    if view is None:
        return None
    role, state = view.backends.get(rank.url, (None, None))
    if role is None:
        return f"not among {view.replica}'s backends"
    if role != rank.role:
        return f"{view.replica} routes it as {role}, the deployment says {rank.role}"
    if state not in IN_SERVICE:
        return f"{view.replica} has it out of service ({state})"
    return None
