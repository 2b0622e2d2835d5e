"""The prompt set every end-to-end case sends, and how one run's answers are collected for comparison."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

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


def chat_body(model: str) -> dict:
    return {"model": model, "messages": CHAT, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}


def run_workload(base_url: str, model: str) -> dict[str, object]:
    """Send every prompt of the set through `base_url`; return answers keyed by what was asked."""
    answers: dict[str, object] = {}

    def complete(prompt: str) -> list[int]:
        reply = http_json(f"{base_url}/v1/completions", completion_body(model, prompt))
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
    answers["stream-short"], _ = stream_completion(f"{base_url}/v1/completions", completion_body(model, SHORT))
    answers["stream-long"], _ = stream_completion(f"{base_url}/v1/completions", completion_body(model, LONG))
    chat = http_json(f"{base_url}/v1/chat/completions", chat_body(model))
    answers["chat"] = chat["choices"][0]["message"]["content"]
    answers["stream-chat"], _ = stream_completion(f"{base_url}/v1/chat/completions", chat_body(model))
    return answers


def prompt_tokens_sent() -> int:
    """A lower bound on prompt tokens of the set in words (each word is at least one token)."""
    texts = [SHORT, LONG, *SHARED_PREFIX, *CONCURRENT, SHORT, LONG]
    return sum(len(t.split()) for t in texts)
