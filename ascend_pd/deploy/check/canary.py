"""The canary: one small completion through a proxy replica, with a prompt no engine has seen, so that D cannot find
its KV in its own prefix cache and has to take it from P."""

from __future__ import annotations

import secrets
import time

from ascend_pd.deploy.check.report import Finding
from ascend_pd.deploy.http_calls import Unreachable, call

MAX_TOKENS = 4
# About a hundred tokens: a few KV blocks on the CPU stand-in, most of one on an NPU (block size 128)
FILLER = "This request checks that the deployment serves and that its decode engine takes the prompt's KV. " * 6


def canary_prompt() -> str:
    """A prompt that starts with fresh random text, so no prefix of it is cached anywhere."""
    return f"ascend-pd check {secrets.token_hex(8)}. {FILLER}"


def send_canary(proxy: str, url: str, model: str, api_key: str | None, timeout: float) -> Finding:
    """POST one greedy completion of MAX_TOKENS to the replica named `proxy` at `url`."""
    body = {"model": model, "prompt": canary_prompt(), "max_tokens": MAX_TOKENS, "temperature": 0}
    started = time.monotonic()
    try:
        answer = call(url + "/v1/completions", timeout, body=body, token=api_key)
    except Unreachable as exc:
        return Finding("failed", f"POST /v1/completions to {proxy}: {exc}")
    seconds = time.monotonic() - started
    payload = answer.json()
    payload = payload if isinstance(payload, dict) else {}
    if answer.status != 200:
        error = payload.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return Finding("failed", f"{proxy} answered {answer.status}: {message or answer.text()[:200]}")
    usage = payload.get("usage") or {}
    output_tokens = usage.get("completion_tokens")
    if not payload.get("choices") or not output_tokens:
        return Finding("failed", f"{proxy} answered 200 without an output token: {answer.text()[:200]}")
    figures = {"proxy": proxy, "prompt_tokens": usage.get("prompt_tokens"), "output_tokens": output_tokens,
               "seconds": round(seconds, 3)}
    return Finding("ok", f"{output_tokens} token(s) for a {usage.get('prompt_tokens', '?')}-token prompt through "
                         f"{proxy} in {seconds:.2f} s", figures)
