"""Replay recorded arrival traces through the autoscaler's load predictors and compare each with today's rule.

Usage: python tools/bench_load_predictor.py [--window 60] [--trace PATH ...] [--predictor smoothed-trend]

For each trace (default: every CSV in tools/data/arrival_traces), each observation window's mean arrival rate is fed
to the last-window rule (the last window's rate x 1.2) and to the predictor; each design rate is then scored against
the rate that arrives over the next window: the share of windows that came in above it (misses), its mean ratio to
what came (over windows with arrivals), and its mean. A table per trace gives the figures over the whole trace and
over each half; the smoothed-trend predictor's constants were chosen on the first halves at 60 s windows, so the
second halves are held out. The verdict, over the whole trace: the predictor beats the rule when it misses no more
often with a lower mean design rate, or misses less often with at most the rule's mean design rate.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ascend_pd.autoscale.predictor import PREDICTORS, make_predictor
from ascend_pd.autoscale.rate_replay import (ReplayScore, beats, read_arrival_trace, replay, score,
                                             window_rates)
from ascend_pd.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRACES = ROOT / "tools" / "data" / "arrival_traces"
BASELINE = "last-window"


def shipped_traces() -> list[Path]:
    return sorted(SHIPPED_TRACES.glob("*.csv"))


def parts(pairs: list) -> list[tuple[str, list]]:
    half = len(pairs) // 2
    return [("whole", pairs), ("first half", pairs[:half]), ("second half", pairs[half:])]


def row(part: str, name: str, result: ReplayScore, verdict: str) -> str:
    return (f"  {part:<12} {name:<16} {result.windows:>7} {result.misses:>6} {result.miss_share:>10.1%} "
            f"{result.mean_overprovision:>14.3f} {result.mean_design_rate:>16.3f}  {verdict}").rstrip()


def bench_trace(path: Path, window: float, candidate: str) -> bool:
    trace = read_arrival_trace(path)
    rates = window_rates(trace, window)
    if len(rates) < 3:
        raise InputError(f"{trace.name} holds {len(rates)} whole {window:g} s windows; at least 3 are needed",
                         field="--window", fix="use a shorter window")
    baseline_pairs = replay(make_predictor(BASELINE), rates, window)
    candidate_pairs = replay(make_predictor(candidate), rates, window)
    shown = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    print(f"trace {trace.name} ({shown}): {trace.span_seconds:g} s, {sum(trace.counts)} arrivals, "
          f"{len(rates)} windows of {window:g} s, {len(baseline_pairs)} scored")
    print(f"  {'part':<12} {'predictor':<16} {'windows':>7} {'misses':>6} {'miss share':>10} "
          f"{'over-provision':>14} {'mean design rps':>16}  beats the rule")
    for (part, base), (_, cand) in zip(parts(baseline_pairs), parts(candidate_pairs)):
        base_score, cand_score = score(base), score(cand)
        print(row(part, f"{BASELINE} x1.2", base_score, ""))
        print(row(part, candidate, cand_score, "yes" if beats(cand_score, base_score) else "no"))
    base_score, cand_score = score(baseline_pairs), score(candidate_pairs)
    won = beats(cand_score, base_score)
    print(f"verdict {trace.name}: {candidate} {'beats' if won else 'does not beat'} {BASELINE} x1.2 "
          f"(misses {cand_score.misses} vs {base_score.misses} of {cand_score.windows}, mean design rate "
          f"{cand_score.mean_design_rate:.3f} vs {base_score.mean_design_rate:.3f} req/s)\n")
    return won


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0,
                        help="observation window in seconds, a multiple of the trace's bucket (default 60)")
    parser.add_argument("--trace", action="append", type=Path, metavar="PATH",
                        help="a start_s,arrivals CSV (repeatable; default: every trace in tools/data/arrival_traces)")
    parser.add_argument("--predictor", default="smoothed-trend", choices=[p for p in PREDICTORS if p != BASELINE],
                        help="the predictor to compare with the last-window rule (default smoothed-trend)")
    args = parser.parse_args(argv)
    traces = args.trace or shipped_traces()
    try:
        won = [bench_trace(path, args.window, args.predictor) for path in traces]
    except InputError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    print(f"{args.predictor} beats {BASELINE} x1.2 on {sum(won)} of {len(won)} traces at {args.window:g} s windows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
