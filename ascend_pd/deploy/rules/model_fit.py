"""TODO"""

from __future__ import annotations

from ascend_pd.deploy.rules.base import Context, rule
