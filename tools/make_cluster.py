"""Write a cluster file of N SuperPoDs joined by the cluster tier, by repeating one SuperPoD of a cluster file.

Usage: python tools/make_cluster.py --superpods 64 [--from cloudmatrix384-x2] --out cm384-x64.yaml

Each SuperPoD gets its own host subnet (10.<pod>.0.0/16 from .11) and device subnet (10.<128 + pod>.0.0/16), node
names `cm<pod>-n<index>`, and the node groups, links and protocols of SuperPoD 0 of the source. This is how a
SuperCluster of many CloudMatrix384 is described for `ascend-pd plan`, and what tools/bench_planner.py plans.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ascend_pd.hardware import configs_dir

MAX_SUPERPODS = 128  # the device subnets 10.128-255.x.x run out after that


def cluster_of_superpods(source: dict, superpods: int) -> dict:
    """The cluster document `source` (parsed YAML) with its SuperPoD 0 repeated `superpods` times."""
    if not 1 <= superpods <= MAX_SUPERPODS:
        raise ValueError(f"superpods must be 1..{MAX_SUPERPODS}, not {superpods}")
    pod_groups = [g for g in source["node_groups"] if g.get("superpod") == 0]
    if not pod_groups:
        raise ValueError(f"cluster '{source['name']}' has no node group in SuperPoD 0")
    groups = []
    for pod in range(superpods):
        hosts = devices = 0
        for index, group in enumerate(pod_groups):
            per_node = source["node_types"][group["type"]]["devices"]
            groups.append({**group, "superpod": pod, "name_prefix": f"cm{pod}-g{index}-n",
                           "host_ip_start": _address(pod, hosts + 11),
                           "device_ip_start": _address(128 + pod, devices + 1)})
            hosts += group["count"]
            devices += group["count"] * per_node
    base = source["name"].removesuffix("-x2")
    return {**source, "name": f"{base}-x{superpods}", "node_groups": groups,
            "description": f"{superpods} SuperPoDs of {source['name']} (SuperPoD 0 repeated), joined by the "
                           f"'{source['topology']['cluster']}' tier"}


def _address(second_octet: int, offset: int) -> str:
    return f"10.{second_octet}.{offset // 256}.{offset % 256}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--superpods", type=int, required=True)
    parser.add_argument("--from", dest="source", default="cloudmatrix384-x2",
                        help="a shipped cluster name or a cluster file with a SuperPoD 0")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    path = Path(args.source)
    if not path.is_file():
        path = configs_dir() / "clusters" / f"{args.source}.yaml"
    document = cluster_of_superpods(yaml.safe_load(path.read_text()), args.superpods)
    args.out.write_text(yaml.safe_dump(document, sort_keys=False))
    print(f"wrote {args.out}: {document['name']}, {sum(g['count'] for g in document['node_groups'])} nodes")


if __name__ == "__main__":
    main()
