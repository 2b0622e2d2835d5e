"""`ascend-pd check`: a running deployment probed over HTTP, each engine rank and proxy replica, one canary request
through the proxy, and the decode engines' metrics for the canary's KV. Plain HTTP from the standard library: it runs
wherever the base install does."""

from ascend_pd.deploy.check.report import CheckReport, Finding, Row
from ascend_pd.deploy.check.run import Limits, Secrets, load_target, run_check

__all__ = ["CheckReport", "Finding", "Limits", "Row", "Secrets", "load_target", "run_check"]
