"""What each KV connector and mode needs on the serving nodes: the one table the plan report and docs/planner.md use.

CANN versions apply where KV moves over the `ascend` protocol (Mooncake's Ascend direct transport, ADXL); on CPUs
over TCP nothing here needs CANN.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_pd.deploy.preflight.checks import MIN_CANN

# vllm-ascend's layerwise connector (kv_p2p/mooncake_layerwise_connector.py, main 182b75e) waits on an NPU event
# before each write and says the wait "may occasionally hang" under ADXL until CANN 8.5.RC1; AscendPDConnector's push
# waits on the same kind of event before every layer it writes (docs/vllm-ascend.md, "Cache writes are asynchronous").
PUSH_MIN_CANN = "8.5.RC1"


@dataclass(frozen=True)
class ConnectorNeeds:
    implementation: str  # deployment.yaml connector.implementation
    mode: str  # connector.mode
    connector: str  # the kv_connector vLLM loads
    min_cann: str  # with protocol ascend
    needs: str  # what else the nodes and the plan must give it


ASCEND_PD_NEEDS = ("ascend-pd with its `ascend` extra importable by every engine (`ascend_pd.connector`); one TP "
                   "per role (APD415), no PP (APD414), a bf16 KV cache (APD413)")

CONNECTOR_NEEDS = (
    ConnectorNeeds("ascend-pd", "pull", "AscendPDConnector", MIN_CANN, ASCEND_PD_NEEDS),
    ConnectorNeeds("ascend-pd", "push", "AscendPDConnector", PUSH_MIN_CANN,
                   f"{ASCEND_PD_NEEDS}; D holds the prompt's blocks from the start of P's prefill, so "
                   "`kv_load_timeout_s` must cover P's queue and prefill"),
    ConnectorNeeds("vllm-ascend", "pull", "MooncakeConnectorV1", MIN_CANN,
                   "engines need only vllm-ascend, which ships it; Ascend NPUs (APD402); P TP at least D TP and a "
                   "multiple of it (APD403); one TP/DP shape per role (APD405); no PP on decode (APD406); an int8 "
                   "KV cache only on MLA models (APD413)"),
    ConnectorNeeds("vllm-ascend", "push", "MooncakeLayerwiseConnector", PUSH_MIN_CANN,
                   "engines need only vllm-ascend, which ships it; Ascend NPUs (APD402); P TP a multiple of D TP "
                   "unless the model has MLA (APD403); one TP/DP shape per role (APD405); no PP on decode (APD406); the proxy serves D's "
                   "metaserver; the only connector that moves an int8 (C8) KV cache"),
)


def connector_needs(implementation: str, mode: str) -> ConnectorNeeds:
    return next(n for n in CONNECTOR_NEEDS if (n.implementation, n.mode) == (implementation, mode))


def needs_sentence(implementation: str, mode: str, protocol: str) -> str:
    """One sentence for a plan report: the connector a deployment runs and what its nodes must have."""
    n = connector_needs(implementation, mode)
    cann = f"CANN {n.min_cann} or later on every node; " if protocol == "ascend" else ""
    return f"`{implementation}` in {mode} mode loads {n.connector} and needs {cann}{n.needs}."


def needs_markdown() -> str:
    """The table as docs/planner.md shows it (tests/unit/deploy/test_connector_needs.py keeps the page in step)."""
    lines = ["| connector | mode | vLLM loads | CANN (protocol `ascend`) | it also needs |", "|---|---|---|---|---|"]
    lines += [f"| {n.implementation} | {n.mode} | {n.connector} | {n.min_cann} or later | {n.needs} |"
              for n in CONNECTOR_NEEDS]
    return "\n".join(lines)
