"""Reading a proxy's live workload (GET /v1/workload) over HTTP, or from a file it was saved to."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ascend_pd.errors import InputError
from ascend_pd.planner.observed import Observed, parse_observed, read_observed_file

TIMEOUT_SECONDS = 10.0


def fetch_workload(proxy_url: str, token: str | None, timeout: float = TIMEOUT_SECONDS) -> dict:
    """The proxy's GET /v1/workload document; InputError (with what to fix) when it cannot be had in `timeout`."""
    url = proxy_url.rstrip("/") + ("" if proxy_url.rstrip("/").endswith("/v1/workload") else "/v1/workload")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 404):
            raise InputError(f"{url} answered {exc.code}: the workload endpoint needs the proxy's admin token",
                             field="--admin-token-file",
                             fix="give the file of the token the proxy was started with (--admin-token-file; a "
                                 "rendered bundle's is secrets/admin.token)") from None
        raise InputError(f"{url} answered {exc.code}", field="--observed", fix="check the proxy's log") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InputError(f"cannot read {url}: {reason}", field="--observed",
                         fix="give the proxy's base URL (http://host:port), reachable from here") from None
    except json.JSONDecodeError:
        raise InputError(f"{url} did not answer JSON", field="--observed",
                         fix="give the ascend-pd proxy's base URL") from None


def observe(source: str, token: str | None = None, timeout: float = TIMEOUT_SECONDS) -> Observed:
    """`source` is a proxy URL (http://...) or a file holding its GET /v1/workload answer."""
    if source.startswith(("http://", "https://")):
        return parse_observed(fetch_workload(source, token, timeout), source)
    return read_observed_file(source)
