"""Reading a proxy's live workload (GET /v1/workload) over HTTP, or from a file it was saved to."""

from __future__ import annotations

from ascend_pd.deploy.http_calls import Unreachable, call
from ascend_pd.errors import InputError
from ascend_pd.planner.observed import Observed, parse_observed, read_observed_file

TIMEOUT_SECONDS = 10.0


def fetch_workload(proxy_url: str, token: str | None, timeout: float = TIMEOUT_SECONDS) -> dict:
    """The proxy's GET /v1/workload document; InputError (with what to fix) when it cannot be had in `timeout`."""
    url = proxy_url.rstrip("/") + ("" if proxy_url.rstrip("/").endswith("/v1/workload") else "/v1/workload")
    try:
        answer = call(url, timeout, token=token)
    except Unreachable as exc:
        raise InputError(f"cannot read {url}: {exc}", field="--observed",
                         fix="give the proxy's base URL (http://host:port), reachable from here") from None
    if answer.status in (401, 404):
        raise InputError(f"{url} answered {answer.status}: the workload endpoint needs the proxy's admin token",
                         field="--admin-token-file",
                         fix="give the file of the token the proxy was started with (--admin-token-file; a "
                             "rendered bundle's is secrets/admin.token)")
    if answer.status >= 300:
        raise InputError(f"{url} answered {answer.status}", field="--observed", fix="check the proxy's log")
    document = answer.json()
    if document is None:
        raise InputError(f"{url} did not answer JSON", field="--observed", fix="give the ascend-pd proxy's base URL")
    return document


def observe(source: str, token: str | None = None, timeout: float = TIMEOUT_SECONDS) -> Observed:
    """`source` is a proxy URL (http://...) or a file holding its GET /v1/workload answer."""
    if source.startswith(("http://", "https://")):
        return parse_observed(fetch_workload(source, token, timeout), source)
    return read_observed_file(source)
