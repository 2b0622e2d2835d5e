"""Refit the two fitted efficiencies of calibration.yaml to the published CloudMatrix384 anchors and print them.

Run `python -m ascend_pd.perf.calibrate`; copy the printed values into calibration.yaml when the model changes.
"""

from __future__ import annotations

from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import calibration_for
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape

# DeepSeek-R1 W8A8 on CloudMatrix384 (arXiv 2506.12708). Figures per 910C package (two devices).
PREFILL_TOKENS_PER_S_PER_PACKAGE = 5655.0  # 4K prompts, 16,384 tokens batched per package, EP32
PREFILL_SHAPE, PREFILL_PROMPT, PREFILL_TOKENS_PER_DEVICE = Shape(tp=1, dp=32, ep=32), 4096, 8192
DECODE_TPOT_S = 0.0494  # batch 96 per package (48 per device), 4K prompt + 256 output, EP320, MTP 1 at 70%
DECODE_SHAPE, DECODE_BATCH_PER_DEVICE, DECODE_CONTEXT = Shape(tp=1, dp=320, ep=320), 48, 4096 + 256 // 2
MTP, MTP_ACCEPTANCE = 1, 0.7


def _solve(measure, target: float, low: float = 0.01, high: float = 1.0) -> float:
    """The efficiency at which `measure(efficiency)` (decreasing in it) equals `target`, by bisection."""
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if measure(mid) > target else (low, mid)
    return (low + high) / 2


def fit() -> dict[str, float]:
    cluster = load_cluster("cloudmatrix384")
    model = get_model("deepseek-r1")
    base = calibration_for(cluster.chip.id)

    def cost(**values: float) -> CostModel:
        return CostModel(model, cluster.chip, cluster, "w8a8", "bf16", base.with_values(**values))

    per_device = PREFILL_TOKENS_PER_DEVICE // PREFILL_PROMPT
    prefill_target = PREFILL_TOKENS_PER_DEVICE / (PREFILL_TOKENS_PER_S_PER_PACKAGE / cluster.chip.dies_per_package)
    prefill = _solve(lambda e: cost(prefill_efficiency=e).prefill_time(PREFILL_SHAPE, [PREFILL_PROMPT] * per_device)
                     .total, prefill_target)
    decode = _solve(lambda e: cost(prefill_efficiency=prefill, decode_efficiency=e)
                    .tpot(DECODE_SHAPE, DECODE_BATCH_PER_DEVICE, DECODE_CONTEXT, MTP, MTP_ACCEPTANCE), DECODE_TPOT_S)
    return {"prefill_efficiency": round(prefill, 4), "decode_efficiency": round(decode, 4)}


if __name__ == "__main__":
    for name, value in fit().items():
        print(f"{name}: {value}")
