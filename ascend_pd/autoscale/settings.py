"""The closed loop's settings and their defaults, typed once: `ascend-pd autoscale` shows and passes these."""

from __future__ import annotations

from dataclasses import dataclass, field

from ascend_pd.autoscale.bounds import Bounds
from ascend_pd.autoscale.predictor import DEFAULT_PREDICTOR

from ascend_pd.planner.replan import HEADROOM, MIN_GAIN, MIN_SAVING, SHRINK_MARGIN

DEFAULT_NODE_COMMAND = "ssh {host}"
DEFAULT_KUBECTL = "kubectl"


@dataclass(frozen=True)
class AutoscaleSettings:
    interval: float = 60.0  # seconds between observations
    agree: int = 2  # intervals in a row that must propose the same deployment before it is applied, unless the
    # running one misses the SLO at the observed rate itself (the proposal is urgent): then the first applies
    cooldown: float = 300.0  # seconds after a change before the next may start
    headroom: float = HEADROOM
    min_gain: float = MIN_GAIN
    min_saving: float = MIN_SAVING
    shrink_margin: float = SHRINK_MARGIN
    calibration: str | None = None
    dry_run: bool = False  # decide and log, never apply
    predictor: str = DEFAULT_PREDICTOR  # what sizes the next interval's rate from the windows so far
    bounds: Bounds = field(default_factory=Bounds)
    # seconds after a change during which going straight back to what it left waits, unless the SLO is missed now:
    # load that swings on a period near the cooldown would otherwise flip the deployment back and forth
    reversal_hold: float = 1800.0


@dataclass(frozen=True)
class RolloutTimeouts:
    """What a change of the deployment waits, in seconds: an instance to start (it loads its weights before /health
    answers: minutes for a large model), a drained one to finish its requests, one command on a node or kubectl."""

    start: float = 1800.0
    drain: float = 600.0
    command: float = 120.0
