"""How an engine runs its steps: the graph mode of its decode steps and whether it schedules ahead of the device.

The mode is read from the engine's launch flags and release (ascend_pd.deploy.engine_flags.execution_mode), so an
estimate is of the engine ascend-pd renders. Prefill steps always run op by op: no graph mode captures a prompt-sized batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GraphMode = Literal["eager", "piecewise", "full"]
GRAPH_MODES: tuple[GraphMode, ...] = ("eager", "piecewise", "full")


@dataclass(frozen=True)
class ExecMode:
    # eager: --enforce-eager; piecewise: graphs between attention ops (an unflagged engine before vllm-ascend
    # v0.21.0rc1); full: a whole decode step replays one captured graph (FULL_DECODE_ONLY, or unflagged from v0.21.0rc1)
    decode_graph: GraphMode = "full"
    # the scheduler prepares step i+1 while the device runs step i (--async-scheduling)
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        if self.decode_graph not in GRAPH_MODES:
            raise ValueError(f"decode_graph must be one of {', '.join(GRAPH_MODES)}, not {self.decode_graph!r}")

    def label(self) -> str:
        return self.decode_graph + (" + async" if self.async_scheduling else "")
