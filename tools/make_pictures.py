"""Draw every picture under docs/pictures/ again from its source (`make pictures`).

Usage: python tools/make_pictures.py [--out docs/pictures]

- architecture.png from docs/pictures/architecture.dot (graphviz `dot`, Debian package graphviz);
- tiers-<cluster>.png for each shipped cluster, from the cluster as ascend_pd.hardware loads it (picture_tiers.py);
- flow-pull.png, flow-push.png, flow-layerwise.png: the KV flows as sequences (picture_flows.py, matplotlib).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from ascend_pd.hardware import load_cluster, shipped_clusters
from picture_flows import FLOWS, draw
from picture_tiers import tiers_dot

SOURCES = Path(__file__).resolve().parent.parent / "docs" / "pictures"
DPI = 96


def run_dot(source: str, out: Path) -> None:
    subprocess.run(["dot", "-Tpng", f"-Gdpi={DPI}", "-o", str(out)], input=source, text=True, check=True)


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
    print(f"wrote {args.out}/: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
