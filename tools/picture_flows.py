"""The three KV flows of docs/design.md ("A request and its KV") as sequence diagrams: pull, push and vllm-ascend's
layerwise. Each flow is data (who sends what to whom, in order) drawn with matplotlib; the side-channel messages and
kv_transfer_params keys they name are the ones ascend_pd.connector.messages and ascend_pd.deploy.handoff define, which
tests/unit/test_pictures.py checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    sender: str
    receiver: str  # the sender itself: work done there, drawn as a note on its lifeline
    text: str
    kind: str = "http"  # http | side (side channel) | kv (KV bytes through the Mooncake Transfer Engine) | work


@dataclass(frozen=True)
class Flow:
    name: str
    title: str
    participants: tuple[str, ...]
    steps: tuple[Step, ...]


PARTIES = ("client", "proxy", "P (prefill)", "D (decode)")
CLIENT, PROXY, P, D = PARTIES

PULL = Flow("pull", "pull: P prefills, D reads P's blocks", PARTIES, (
    Step(CLIENT, PROXY, "POST /v1/completions"),
    Step(PROXY, P, "max_tokens 1, kv_transfer_params {do_remote_decode}"),
    Step(P, P, "prefill; keep the blocks", "work"),
    Step(P, PROXY, "{do_remote_prefill, remote_host, remote_block_ids, ...}"),
    Step(PROXY, D, "the body with P's kv_transfer_params as P returned them"),
    Step(D, P, "GetMeta (once per peer)", "side"),
    Step(P, D, "AgentMetadata", "side"),
    Step(P, D, "KV blocks, read by D", "kv"),
    Step(D, P, "ReadDone: P frees the blocks", "side"),
    Step(D, PROXY, "tokens (stream)"),
    Step(PROXY, CLIENT, "tokens, relayed as they come"),
))

PUSH = Flow("push", "push: P writes each layer into D's blocks while it prefills", PARTIES, (
    Step(CLIENT, PROXY, "POST /v1/completions"),
    Step(PROXY, P, "max_tokens 1, {do_remote_decode, transfer_id}"),
    Step(PROXY, D, "{do_remote_prefill, transfer_id, remote_engine_id, remote_host, remote_port}"),
    Step(D, P, "PushReady {transfer_id, block_ids, expires_in_s}", "side"),
    Step(P, P, "prefill layer by layer", "work"),
    Step(P, D, "each layer's KV as soon as it is written", "kv"),
    Step(P, D, "PushDone {transfer_id, ok} from every P rank", "side"),
    Step(P, PROXY, "one token (not relayed)"),
    Step(D, PROXY, "tokens (stream)"),
    Step(PROXY, CLIENT, "tokens, relayed as they come"),
))

LAYERWISE = Flow("layerwise", "layerwise (vllm-ascend's MooncakeLayerwiseConnector): D first", PARTIES, (
    Step(CLIENT, PROXY, "POST /v1/completions"),
    Step(PROXY, D, "{do_remote_prefill, metaserver: URL with this request's token}"),
    Step(D, PROXY, "POST /v1/metaserver: D's block coordinates"),
    Step(PROXY, P, "max_tokens 1, {do_remote_decode} with D's coordinates"),
    Step(P, D, "KV layer by layer (vllm-ascend's connector)", "kv"),
    Step(P, PROXY, "one token (not relayed)"),
    Step(D, PROXY, "tokens (stream)"),
    Step(PROXY, CLIENT, "tokens, relayed as they come"),
))

FLOWS = (PULL, PUSH, LAYERWISE)
STYLES = {"http": ("black", "-", 1.2), "side": ("tab:purple", "--", 1.2), "kv": ("tab:blue", "-", 3.0)}
LEGEND = {"http": "HTTP through the proxy", "side": "side channel (ZeroMQ)", "kv": "KV bytes (Mooncake Transfer Engine)"}


def draw(flow: Flow, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    columns = {name: index * 3.2 for index, name in enumerate(flow.participants)}
    rows = len(flow.steps)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.42 * rows), dpi=110)
    bottom = -(rows + 0.6)
    for name, x in columns.items():
        ax.plot([x, x], [0, bottom], color="grey", linewidth=0.8, zorder=1)
        ax.text(x, 0.35, name, ha="center", va="bottom", fontsize=10, fontweight="bold",
                bbox={"boxstyle": "round", "facecolor": "#f4f4f4", "edgecolor": "grey"})
    for row, step in enumerate(flow.steps, start=1):
        y = -row
        if step.sender == step.receiver:
            ax.text(columns[step.sender], y, step.text, ha="center", va="center", fontsize=8, zorder=3,
                    bbox={"boxstyle": "round", "facecolor": "#fff2cc", "edgecolor": "#c9a227"})
            continue
        color, style, width = STYLES[step.kind]
        start, end = columns[step.sender], columns[step.receiver]
        ax.annotate("", xy=(end, y), xytext=(start, y), zorder=2,
                    arrowprops={"arrowstyle": "-|>", "color": color, "linestyle": style, "linewidth": width})
        ax.text((start + end) / 2, y + 0.08, step.text, ha="center", va="bottom", fontsize=7.5, color=color,
                zorder=3, bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85})
    used = [kind for kind in STYLES if any(step.kind == kind for step in flow.steps)]
    ax.legend(handles=[Line2D([], [], color=STYLES[k][0], linestyle=STYLES[k][1], linewidth=STYLES[k][2],
                              label=LEGEND[k]) for k in used], loc="lower center", fontsize=8, ncol=len(used),
              bbox_to_anchor=(0.5, -0.06), frameon=False)
    ax.set_xlim(-1.4, max(columns.values()) + 1.4)
    ax.set_ylim(bottom - 0.3, 1.0)
    ax.set_title(flow.title, fontsize=11)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
