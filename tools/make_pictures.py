"""Draw every picture under docs/pictures/ again from its source (`make pictures`).

Usage: python tools/make_pictures.py [--out docs/pictures]

- architecture.png from docs/pictures/architecture.dot (graphviz `dot`, Debian package graphviz);
- tiers-<cluster>.png for each shipped cluster, from the cluster as ascend_pd.hardware loads it (picture_tiers.py);
- flow-pull.png, flow-push.png, flow-layerwise.png: the KV flows as sequences (picture_flows.py, matplotlib);
- walkthrough-placement.png: the placement.png that docs/walkthrough.md's `cluster new` and `plan` commands write.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ascend_pd.hardware import load_cluster, shipped_clusters
from picture_flows import FLOWS, draw
from picture_tiers import tiers_dot

SOURCES = Path(__file__).resolve().parent.parent / "docs" / "pictures"
DPI = 96
# docs/walkthrough.md runs these in one directory, in this order; tests/unit/test_walkthrough.py finds each in it.
WALKTHROUGH_COMMANDS = (
    ("cluster", "new", "--name", "my-a3", "--node-type", "atlas-800t-a3", "--node", "a3-left=10.20.0.17,10.30.0.1",
     "--node", "a3-right=10.20.3.41,10.30.1.1", "--interface", "enp189s0f0", "--out", "my-a3.yaml"),
    ("plan", "--model", "qwen3-32b", "--cluster", "my-a3.yaml", "--rate", "8", "--model-path", "/data/models/Qwen3-32B",
     "--out", "plan"),
)


def run_dot(source: str, out: Path) -> None:
    subprocess.run(["dot", "-Tpng", f"-Gdpi={DPI}", "-o", str(out)], input=source, text=True, check=True)


def draw_walkthrough_placement(out: Path) -> None:
    """The walk-through's placement map, written by the same commands the page shows, in a scratch directory."""
    with tempfile.TemporaryDirectory() as scratch:
        for args in WALKTHROUGH_COMMANDS:
            subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", *args], cwd=scratch, check=True,
                           capture_output=True)
        shutil.copyfile(Path(scratch) / "plan" / "placement.png", out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SOURCES, help="where the PNG files go (default: docs/pictures)")
    args = parser.parse_args()
    if shutil.which("dot") is None:
        print("no graphviz `dot` on PATH: sudo apt-get install -y graphviz (or make pictures as root)",
              file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sorted(SOURCES.glob("*.dot")):
        run_dot(source.read_text(encoding="utf-8"), args.out / f"{source.stem}.png")
        written.append(f"{source.stem}.png")
    for name in shipped_clusters():
        run_dot(tiers_dot(load_cluster(name)), args.out / f"tiers-{name}.png")
        written.append(f"tiers-{name}.png")
    for flow in FLOWS:
        draw(flow, args.out / f"flow-{flow.name}.png")
        written.append(f"flow-{flow.name}.png")
    draw_walkthrough_placement(args.out / "walkthrough-placement.png")
    written.append("walkthrough-placement.png")
    print(f"wrote {args.out}/: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
