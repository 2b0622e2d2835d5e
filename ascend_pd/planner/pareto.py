"""The Pareto frontier of throughput per device against speed per user (tokens/s each), as rows and a PNG plot."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ascend_pd.defaults import DECODE_SLOT_UTILISATION, KV_HEADROOM
from ascend_pd.perf.cost import CostModel
from ascend_pd.planner.capacity import Option, Requirements

BATCH_POINTS = 10


@dataclass(frozen=True)
class Point:
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    kind: str
    label: str
    tpot_ms: float


def pareto_points(cost: CostModel, req: Requirements, options: dict[str, list[Option]]) -> list[Point]:
    """Each decode shape at a range of batch sizes, paired with the prefill shape of the best rate per device in the
    fluid limit (fractional instance counts); each colocated option at its planned batch."""
    points: list[Point] = []
    mean_output = float(req.lengths.output_tokens.mean())
    context = req.lengths.mean_decode_context()
    prefill = max(options["prefill"], key=lambda o: o.rate_per_device, default=None)
    if prefill is not None:
        for d in options["decode"]:
            top = max(1, cost.max_decode_batch(d.shape, context / KV_HEADROOM))
            for batch in np.unique(np.geomspace(1, top, BATCH_POINTS).round()).astype(int):
                tpot = cost.tpot(d.shape, float(batch), context, req.mtp, req.mtp_acceptance)
                decode_rate = DECODE_SLOT_UTILISATION * batch * d.shape.dp / (mean_output * tpot) / d.devices
                per_device = 1 / (1 / prefill.rate_per_device + 1 / decode_rate)
                points.append(Point(per_device * mean_output, 1 / tpot, "disaggregated",
                                    f"P {prefill.shape.label()} + D {d.shape.label()} batch {batch}", tpot * 1e3))
    for c in options["colocated"]:
        points.append(Point(c.rate_per_device * mean_output, 1 / c.tpot, "colocated",
                            f"C {c.shape.label()} batch {c.batch_per_rank} chunk {c.chunk_tokens}", c.tpot * 1e3))
    return points


def frontier(points: list[Point]) -> list[Point]:
    """Points no other point beats on both axes, fastest per user first."""
    best: list[Point] = []
    for p in sorted(points, key=lambda p: (-p.tokens_per_s_per_user, -p.tokens_per_s_per_device)):
        if not best or p.tokens_per_s_per_device > best[-1].tokens_per_s_per_device:
            best.append(p)
    return best


def write_csv(points: list[Point], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["tokens_per_s_per_device", "tokens_per_s_per_user", "tpot_ms", "kind", "config"])
        for p in points:
            writer.writerow([f"{p.tokens_per_s_per_device:.2f}", f"{p.tokens_per_s_per_user:.2f}",
                             f"{p.tpot_ms:.2f}", p.kind, p.label])


def write_png(points: list[Point], front: list[Point], chosen: Point | None, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for kind, color in (("disaggregated", "tab:blue"), ("colocated", "tab:orange")):
        xs = [p.tokens_per_s_per_user for p in points if p.kind == kind]
        ys = [p.tokens_per_s_per_device for p in points if p.kind == kind]
        ax.scatter(xs, ys, s=10, alpha=0.35, color=color, label=kind)
    ax.plot([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_device for p in front], color="black",
            linewidth=1.5, label="Pareto frontier")
    if chosen is not None:
        ax.scatter([chosen.tokens_per_s_per_user], [chosen.tokens_per_s_per_device], marker="*", s=160,
                   color="tab:red", zorder=5, label="plan")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per device")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
