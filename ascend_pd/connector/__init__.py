"""vLLM KV connector for PD disaggregation over the Mooncake Transfer Engine (pull, or layered push).

vLLM loads it with {"kv_connector": "AscendPDConnector", "kv_connector_module_path": "ascend_pd.connector"}.
vLLM is imported only when the connector class is first used, so the pure modules here load without it.
"""

from __future__ import annotations

import importlib

__all__ = ["AscendPDConnector"]


def __getattr__(name: str):
    if name == "AscendPDConnector":
        return importlib.import_module("ascend_pd.connector.connector").AscendPDConnector
    raise AttributeError(f"module 'ascend_pd.connector' has no attribute {name!r}")
