"""The prompt set every end-to-end case sends, and how one run's answers are collected for comparison."""

from __future__ import annotations

import functools
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .stack import http_json, stream_completion

WORDS = ("ascend prefill decode cache block layer head token model serve proxy engine tensor device node pod "
         "transfer kernel latency throughput batch prompt output stream request route health metric plan").split()
MAX_TOKENS = 16


def _words(seed: int, count: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def fresh_long_prompt(seed: int) -> str:
    """A long prompt no earlier request shares a prefix with, so neither P nor D finds it cached."""
    return f"{seed} " + _words(1000 + seed, 420)


SHORT = "the cache block layer"
LONG = _words(1, 420)  # several hundred tokens: many KV blocks of 32
PREFIX = _words(2, 150)
SHARED_PREFIX = [PREFIX + " alpha beta gamma", PREFIX + " node pod proxy"]
CONCURRENT = [_words(10 + i, 20 + 15 * i) for i in range(6)]
CHAT = [{"role": "user", "content": _words(3, 40)}]


def completion_body(model: str, prompt: str, max_tokens: int = MAX_TOKENS) -> dict:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True}


# tools/make_tiny_models.py trains the special tokens first: <s> is 0, </s> (EOS) is 1.
EOS_TOKEN_ID = 1


@functools.cache
def eos_first_prompt(model_dir: Path, tries: int = 20000, chunk: int = 512) -> str:
    """A prompt whose greedy first token is EOS for this model, found with transformers in float32 (as the e2e
    engines run), with a clear margin over the runner-up so that vLLM's kernels pick EOS too. vLLM refuses
    logit_bias under speculative decoding, so the prompt itself has to end in EOS.

    Candidates are scored in batches of prompts of one token length (no padding to shift positions), and the
    first that passes is scored again alone: one prompt at a time, the search took about 22 s per model on 2 cores."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def eos_first(ids: torch.Tensor) -> list[bool]:
        top = model(ids).logits[:, -1].topk(2)
        return [int(index[0]) == EOS_TOKEN_ID and float(value[0] - value[1]) > 1.0
                for value, index in zip(top.values, top.indices)]

    with torch.no_grad():
        for first in range(0, tries, chunk):
            prompts = {seed: _words(50_000 + seed, 6 + seed % 10) for seed in range(first, min(first + chunk, tries))}
            by_length: dict[int, list[tuple[int, list[int]]]] = {}
            for seed, prompt in prompts.items():
                ids = tokenizer(prompt).input_ids
                by_length.setdefault(len(ids), []).append((seed, ids))
            passing = [seed for group in by_length.values()
                       for (seed, _), ok in zip(group, eos_first(torch.tensor([ids for _, ids in group]))) if ok]
            for seed in sorted(passing):
                if eos_first(tokenizer(prompts[seed], return_tensors="pt").input_ids)[0]:
                    return prompts[seed]
    raise AssertionError(f"no prompt of {tries} makes {model_dir.name} answer EOS first")


def eos_first_body(model: str, prompt: str) -> dict:
    """A request whose first generated token is EOS: the answer is empty and ends "stop". Through the proxy,
    prefill must still end length-capped (min_tokens 1) so that it hands its KV to decode."""
    return {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "return_token_ids": True}


def chat_body(model: str) -> dict:
    return {"model": model, "messages": CHAT, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}


def run_workload(base_url: str, model: str, eos_prompt: str, cache_salt: str | None = None) -> dict[str, object]:
    """Send every prompt of the set through `base_url`; return answers keyed by what was asked. With `cache_salt`,
    the blocks the requests cache are their own: no request without that salt finds them (vLLM hashes the salt into
    each block's key)."""
    answers: dict[str, object] = {}

    def salted(body: dict) -> dict:
        return dict(body, cache_salt=cache_salt) if cache_salt else body

    def complete(prompt: str) -> list[int]:
        reply = http_json(f"{base_url}/v1/completions", salted(completion_body(model, prompt)))
        choice = reply["choices"][0]
        assert choice["text"] or choice.get("token_ids"), reply  # never an empty 200
        return choice["token_ids"]

    answers["short"] = complete(SHORT)
    answers["long"] = complete(LONG)
    for i, prompt in enumerate(SHARED_PREFIX):  # one after the other, so the second can reuse cached blocks
        answers[f"shared-{i}"] = complete(prompt)
    with ThreadPoolExecutor(len(CONCURRENT)) as pool:
        for i, ids in enumerate(pool.map(complete, CONCURRENT)):
            answers[f"concurrent-{i}"] = ids
    answers["stream-short"], _ = stream_completion(f"{base_url}/v1/completions", salted(completion_body(model, SHORT)))
    answers["stream-long"], _ = stream_completion(f"{base_url}/v1/completions", salted(completion_body(model, LONG)))
    eos = http_json(f"{base_url}/v1/completions", salted(eos_first_body(model, eos_prompt)))["choices"][0]
    answers["eos-first"] = (eos["text"], eos["finish_reason"], eos.get("token_ids"))
    text, events = stream_completion(f"{base_url}/v1/completions", salted(eos_first_body(model, eos_prompt)))
    answers["stream-eos-first"] = (text, [c["finish_reason"] for e in events for c in e["choices"]
                                          if c.get("finish_reason")])
    chat = http_json(f"{base_url}/v1/chat/completions", salted(chat_body(model)))
    answers["chat"] = chat["choices"][0]["message"]["content"]
    answers["stream-chat"], _ = stream_completion(f"{base_url}/v1/chat/completions", salted(chat_body(model)))
    return answers


def prompt_tokens_sent() -> int:
    """A lower bound on prompt tokens of the set in words (each word is at least one token)."""
    texts = [SHORT, LONG, *SHARED_PREFIX, *CONCURRENT, SHORT, LONG]
    return sum(len(t.split()) for t in texts)
