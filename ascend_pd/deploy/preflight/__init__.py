"""Preflight: check on a serving node that devices, links, drivers, libraries, ports and environment are ready."""

from ascend_pd.deploy.preflight.result import CheckResult
from ascend_pd.deploy.preflight.run import Site, Target, find_node, run_preflight

__all__ = ["CheckResult", "Site", "Target", "find_node", "run_preflight"]
