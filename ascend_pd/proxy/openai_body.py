"""OpenAI request bodies: the prompt text they carry, and the rewrites that send them to P and to D."""

from __future__ import annotations

from typing import Any


def prompt_text(body: dict[str, Any]) -> str:
    """The text of a completions `prompt` or of every chat message, joined; token-id prompts become digits."""
    if "messages" in body:
        return "\n".join(_content_text(m.get("content")) for m in body["messages"] if isinstance(m, dict))
    prompt = body.get("prompt", "")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return " ".join(str(p) for p in prompt)
    return ""


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text parts carry prompt text
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def prefill_body(body: dict[str, Any], kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    """What P gets: one output token, no streaming, no streaming options and no minimum length, one choice."""
    prefill = dict(body)
    prefill["stream"] = False
    prefill.pop("stream_options", None)  # a stream option without stream:true is a 400 on vLLM
    prefill.pop("min_tokens", None)
    prefill["max_tokens"] = 1
    if "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    if "n" in prefill:
        prefill["n"] = 1
    prefill["kv_transfer_params"] = kv_transfer_params
    return prefill


def decode_body(body: dict[str, Any], kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    decode = dict(body)
    decode["kv_transfer_params"] = kv_transfer_params
    return decode


def is_streaming(body: dict[str, Any]) -> bool:
    return bool(body.get("stream", False))
