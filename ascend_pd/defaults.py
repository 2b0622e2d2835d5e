"""Planning and serving defaults, each typed once. Plain constants: this module imports nothing from the package, so
every layer (hardware and models up to cli) may read it. Each line says what the value is and where it comes from.
tests/unit/test_defaults.py checks the copies that cannot import it directly (pydantic, click, dataclass defaults)."""

# --- speculative decoding --------------------------------------------------------------------------------------
MTP_ACCEPTANCE = 0.7  # chance one MTP draft token is accepted; CloudMatrix-Infer (arXiv 2506.12708): MTP 1 at 70%

# --- proxy -----------------------------------------------------------------------------------------------------
PROXY_PORT = 8080  # port the PD proxy listens on; planner choice (instance HTTP ports start at 8100)
PROXY_POLICY = "least-loaded"  # P and D routing (lighter of two random ranks); planner choice, what capacity models
# proxy CPU on the 2-core development VM (docs/benchmarks.md, Proxy), which planner/proxy_sizing.py sizes workers by
PROXY_CPU_PER_REQUEST_S = 0.4e-3  # a streamed request, tokens together, at the maximum rate; measured, bench_proxy.py
PROXY_CPU_PER_EVENT_S = 45e-6  # one SSE event relayed, at 64 streams of one event per read; measured, bench_proxy.py
PROXY_CORE_UTILISATION = 0.6  # share of a proxy worker's core planned busy, so bursts do not queue; planner choice

# --- engine ----------------------------------------------------------------------------------------------------
# The vllm-ascend release estimates price and render's image runs: the newest one docs/vllm-ascend.md was read against
VLLM_ASCEND_RELEASE = "0.25.1rc1"  # vllm-ascend release (v0.25.1rc1 of 2026-08-19), inside pyproject's `ascend` pin

# --- serving nodes ---------------------------------------------------------------------------------------------
MODEL_ROOT = "/models"  # where a plan says each node holds the weights (<root>/<model id>, or plan --model-path); planner choice

# --- SLO -------------------------------------------------------------------------------------------------------
SLO_TTFT_MS = 2000  # default time-to-first-token SLO; planner choice
SLO_TPOT_MS = 50  # default time-per-output-token SLO; CloudMatrix-Infer's decode target (arXiv 2506.12708)
SLO_ATTAINMENT = 0.9  # share of requests that must meet both SLOs; planner choice

# --- planner capacity ------------------------------------------------------------------------------------------
DECODE_SLOT_UTILISATION = 0.9  # share of a rank's decode slots busy at steady state; planner choice
KV_HEADROOM = 0.9  # share of the KV cache planned for, so growing sequences are not preempted; planner choice
MAX_SEQS_PER_RANK = 512  # most sequences the planner puts on one decode DP rank; planner choice
PREFILL_BATCH_TOKENS = 16384  # max_num_batched_tokens of a prefill DP rank; planner choice, CloudMatrix-Infer's 16,384

# --- device memory ---------------------------------------------------------------------------------------------
GPU_MEMORY_UTILIZATION = 0.9  # share of device HBM vLLM may use; vLLM's own --gpu-memory-utilization default
RUNTIME_RESERVE_BYTES = 3.5 * 1024**3  # activations, workspace, HCCL per device; vllm-ascend practice (6-10% of 64G)
