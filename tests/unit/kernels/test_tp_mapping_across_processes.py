"""plan_tp_transfer picks the same replicas for a request in every process: the prefill and decode workers that
compute it for one request are separate processes, each started with its own string-hash seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Every layout vLLM can build from these head counts and TP sizes, GQA and MLA, and request ids as the proxy and
# vLLM spell them. Printed as JSON: one process's whole answer.
PICKS_IN_A_FRESH_PROCESS = """
import json
from ascend_pd.errors import InputError
from ascend_pd.kernels.tp_mapping import plan_tp_transfer

request_ids = [f"cmpl-pd-{i:032x}-0" for i in range(16)] + [f"chatcmpl-{i}" for i in range(16)] + ["", "é"]
picks = {}
for heads in (1, 2, 4, 8, 16):
    for src_tp in (1, 2, 4, 8, 16, 32):
        for dst_tp in (1, 2, 4, 8, 16, 32):
            for is_mla in (False, True):
                try:
                    plan = plan_tp_transfer(heads, src_tp, dst_tp, is_mla=is_mla)
                except InputError:
                    continue
                picks[f"{heads}/{src_tp}/{dst_tp}/{is_mla}"] = [
                    [read.src_rank for read in plan.reads(rank, rid)] for rank in range(dst_tp) for rid in request_ids]
print(json.dumps({"hash_of_a_request_id": hash("cmpl-pd-0-0"), "picks": picks}))
"""


def answer_with_hash_seed(seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    result = subprocess.run([sys.executable, "-c", PICKS_IN_A_FRESH_PROCESS], env=env, capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout)


def test_processes_with_different_hash_seeds_pick_the_same_replicas():
    answers = [answer_with_hash_seed(seed) for seed in ("0", "1", "4242")]
    # The processes really do hash strings differently, so a pick that went through hash() would differ here.
    assert len({a["hash_of_a_request_id"] for a in answers}) == 3
    picks = [a["picks"] for a in answers]
    assert picks[0] == picks[1] == picks[2]
    # and the comparison covers layouts where there is a choice to make: a source head held by several ranks
    assert any(len({tuple(reads) for reads in layout}) > 1 for layout in picks[0].values())
