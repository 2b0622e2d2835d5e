"""Validation rules, one module per concern; each rule yields Diagnostics for one code."""

from __future__ import annotations

from ascend_pd.deploy.rules.base import RULES, Context, rule
from ascend_pd.deploy.rules import (connector, generations, model_fit, names,  # noqa: F401  (registers rules)
                                    pd_match, placement, ports, roles)

__all__ = ["RULES", "Context", "rule"]
