"""Cluster files for tests of clusters that mix chips: one with a 910B3 node and a 910C node, and one of each chip
alone. All three share node names, links and topology, so a figure that differs between them comes from the chip."""

from pathlib import Path

import yaml

NODE_TYPES = {"a2": {"chip": "910b3", "devices": 8}, "a3": {"chip": "910c", "devices": 16}}
GROUPS = {"a2": {"type": "a2", "count": 1, "name_prefix": "b-", "host_ip_start": "10.0.0.1"},
          "a3": {"type": "a3", "count": 1, "name_prefix": "c-", "host_ip_start": "10.0.1.1"}}
LINKS = {"sio": {"bandwidth_gbytes_per_s": 224, "latency_us": 1, "tp_capable": True},
         "hccs": {"bandwidth_gbytes_per_s": 196, "latency_us": 1.5, "tp_capable": True},
         "roce": {"bandwidth_gbytes_per_s": 25, "latency_us": 10, "tp_capable": False}}


def _cluster(name: str, types: list[str]) -> dict:
    return {"apiVersion": "ascend-pd/v1", "kind": "Cluster", "name": name,
            "node_types": {t: NODE_TYPES[t] for t in types}, "links": LINKS,
            "topology": {"package": "sio", "node": "hccs", "cluster": "roce"},
            "node_groups": [GROUPS[t] for t in types], "protocols": ["ascend", "tcp"]}


def write_clusters(directory: Path) -> dict[str, Path]:
    """'mixed' (nodes b-00: 910b3 and c-00: 910c), '910b3' (b-00 alone) and '910c' (c-00 alone), as files."""
    paths = {}
    for key, name, types in (("mixed", "mixed", ["a2", "a3"]), ("910b3", "only-910b3", ["a2"]),
                             ("910c", "only-910c", ["a3"])):
        paths[key] = directory / f"{name}.yaml"
        paths[key].write_text(yaml.safe_dump(_cluster(name, types)))
    return paths


def instance(name: str, role: str, placements: list[tuple[str, list[int]]]) -> dict:
    """One DP rank of TP over `placements` ((node, device ids) entries), ports apart from any other instance's."""
    first = placements[0][1][0]
    return {"name": name, "role": role, "parallel": {"tp": sum(len(ids) for _, ids in placements)},
            "devices": [{"node": node, "devices": ids, "dp_rank": 0} for node, ids in placements],
            "http_port": 8100 + first * 10, "kv_port": 36000 + first * 100, "engine_id": name,
            "vllm": {"max_model_len": 4096, "max_num_batched_tokens": 8192 if role == "prefill" else 512,
                     "max_num_seqs": 16 if role == "prefill" else 128}}


def deployment(cluster: Path, instances: list[dict], implementation: str = "ascend-pd") -> dict:
    """Qwen3-32B over `instances` on `cluster`, pulled over the Ascend transport."""
    return {"apiVersion": "ascend-pd/v1", "kind": "Deployment", "metadata": {"name": "mixed"},
            "cluster": str(cluster),
            "model": {"name": "qwen3-32b", "quantization": "bf16", "kv_cache_dtype": "bf16", "path": "/models/q"},
            "connector": {"implementation": implementation, "mode": "pull", "protocol": "ascend"},
            "workload": {"input_tokens": {"mean": 512}, "output_tokens": {"mean": 256}, "rate": 2.0},
            "slo": {"ttft_ms": 2000, "tpot_ms": 60, "attainment": 0.9},
            "instances": instances, "proxy": {"node": instances[-1]["devices"][0]["node"], "port": 8080}}
