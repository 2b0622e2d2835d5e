"""Load predictors: from the arrival rate of each observation window so far, the rate to size the deployment for
until the next window, that is a forecast of the next window's rate plus a margin for what the forecast misses.

Before the first window every predictor's design rate is 0.0 (nothing seen, nothing to size for). A window with no
arrival is a rate of 0.0 like any other, so an idle deployment's design rate falls toward 0 and it can shrink.
`tools/bench_load_predictor.py` replays recorded traces through them (`rate_replay.py`)."""

from __future__ import annotations

import math
from collections import deque
from typing import Protocol

import numpy as np

from ascend_pd.errors import InputError
from ascend_pd.planner.replan import HEADROOM  # make_predictor takes the headroom in use


# Chosen on the first half of each shipped trace (tools/data/arrival_traces) at 60 s windows, from a region of
# settings that all beat the last-window rule there; the second halves were held out (tools/bench_load_predictor.py).
LEVEL_SMOOTHING = 0.4  # share of each window's surprise the level takes: less smooths noise away, more follows change
TREND_WINDOWS = 8  # windows a rising line is fitted through; fewer and two noisy windows read as a ramp
# A rise counts only when its slope is this many standard errors above 0: a lone window at 3x the steady rate scores
# about 1.7 over 8 windows, so one spike does not read as a ramp, while a steady ramp scores far above it.
TREND_SIGNIFICANCE = 3.0
ERROR_MEMORY = 30  # recent one-step forecast errors the margin is taken from (half an hour of 60 s windows)
ERROR_QUANTILE = 0.95  # the margin covers this share of those errors
MIN_MARGIN = 0.05  # a run of quiet windows says little about the next one: never size closer than this to the forecast
# The widest margin, as a share of the forecast: the planner's headroom. On bursty load a wider one bought fewer misses
# only with more devices than the last-window rule takes, and a burst out of idle cannot be read from history anyway.
MAX_MARGIN = HEADROOM
WARM_UP_ERRORS = 3  # below this many known errors the margin is MAX_MARGIN (then it sizes as the last-window rule)


class RatePredictor(Protocol):
    def update(self, at: float, rate: float) -> None:
        """One observation window's arrival rate (req/s), the window ending at `at` (seconds)."""

    def design_rate(self) -> float:
        """The rate (req/s) to size the deployment for until the next update; 0.0 before the first."""


def _checked_rate(rate: float) -> float:
    try:
        value = float(rate)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"a window's arrival rate must be a finite number >= 0, not {rate!r}", field="rate")
    return value


class LastWindowTimes:
    """Today's rule: the last window's rate times `factor` (1 + the planner's headroom)."""

    def __init__(self, factor: float = 1 + HEADROOM):
        if not factor > 0:
            raise InputError(f"the last-window factor must be > 0, not {factor}", field="factor")
        self.factor = factor
        self._last = 0.0

    def update(self, at: float, rate: float) -> None:
        self._last = _checked_rate(rate)

    def design_rate(self) -> float:
        return self._last * self.factor


class SmoothedTrend:
    """A smoothed level of the window rates, or, while the last TREND_WINDOWS rates rise along a line clearly steeper
    than their noise, that line one window ahead; times 1 + a margin: the ERROR_QUANTILE of its own recent relative
    one-step errors (how far windows came in above the forecast), within [MIN_MARGIN, max_margin]. Steady load is
    sized tight, bursty load at max_margin, a ramp ahead of itself; a single spike moves the level only part way,
    and idle windows take the level (so the design rate) down toward 0 geometrically. Falling lines are not
    extrapolated: the level follows load down without it, and under-sizing costs more than a window of extra devices.
    `at` is not used: windows are taken as evenly spaced, as the autoscaler observes on a fixed interval."""

    def __init__(self, max_margin: float = MAX_MARGIN):
        if not max_margin >= 0:
            raise InputError(f"the largest margin must be >= 0, not {max_margin}", field="max_margin")
        self.max_margin = max_margin
        self.min_margin = min(MIN_MARGIN, max_margin)
        self._level: float | None = None
        self._recent: deque[float] = deque(maxlen=TREND_WINDOWS)
        self._errors: deque[float] = deque(maxlen=ERROR_MEMORY)

    def forecast(self) -> float:
        """The next window's rate as this predictor expects it (0.0 before the first window)."""
        if self._level is None:
            return 0.0
        rise = self._significant_rise()
        return max(self._level, rise if rise is not None else 0.0)

    def margin(self) -> float:
        """The share above the forecast the design rate adds."""
        if len(self._errors) < WARM_UP_ERRORS:
            return self.max_margin
        return min(max(float(np.quantile(self._errors, ERROR_QUANTILE)), self.min_margin), self.max_margin)

    def update(self, at: float, rate: float) -> None:
        rate = _checked_rate(rate)
        if self._level is None:
            self._level = rate
        else:
            expected = self.forecast()
            # Errors above max_margin are kept at it: the margin never exceeds it, so their size does not matter,
            # and an arrival after a forecast of 0 (idle) has no finite relative error.
            error = (rate - expected) / expected if expected > 0 else (self.max_margin if rate > 0 else 0.0)
            self._errors.append(min(error, self.max_margin))
            self._level += LEVEL_SMOOTHING * (rate - self._level)
        self._recent.append(rate)

    def design_rate(self) -> float:
        return self.forecast() * (1 + self.margin())

    def _significant_rise(self) -> float | None:
        """The next window's rate on the line through the recent windows, when that line rises significantly."""
        if len(self._recent) < TREND_WINDOWS:
            return None
        rates = np.asarray(self._recent)
        x = np.arange(TREND_WINDOWS) - (TREND_WINDOWS - 1) / 2
        slope = float(x @ rates / (x @ x))
        fitted = rates.mean() + slope * x
        standard_error = math.sqrt(float(((rates - fitted) ** 2).sum()) / (TREND_WINDOWS - 2) / float(x @ x))
        if slope <= 0 or slope <= TREND_SIGNIFICANCE * standard_error:
            return None
        return float(rates.mean() + slope * (x[-1] + 1))


PREDICTORS = ("last-window", "smoothed-trend")
DEFAULT_PREDICTOR = "smoothed-trend"


def make_predictor(name: str, headroom: float = HEADROOM) -> RatePredictor:
    """The predictor called `name` (one of PREDICTORS); `headroom` is the last-window rule's margin and the widest
    margin of the others."""
    if name == "last-window":
        return LastWindowTimes(1 + headroom)
    if name == "smoothed-trend":
        return SmoothedTrend(max_margin=headroom)
    raise InputError(f"no load predictor is called '{name}'", field="predictor",
                     fix=f"use one of: {', '.join(PREDICTORS)}")
