"""OpenAI bodies: the prompt text a request carries, the rewrites that send it to P and to D, and P's answer
turned into the client's when P already had the whole answer."""

from __future__ import annotations

from typing import Any

import msgspec

INTERNAL_FIELDS = ("kv_transfer_params",)  # set by the proxy for P and D only: a client's own is dropped


class BadBody(ValueError):
    """A client body the proxy cannot route: not a JSON object, or a field it reads of the wrong type."""


class _ContentPart(msgspec.Struct):
    """A part of a chat message's content: a text part's text is a string; other parts (images, audio) have none."""

    text: str = ""


class _Message(msgspec.Struct):
    """A chat message, as far as the proxy reads it: its content is text or a list of parts (vLLM also takes a plain
    string as a part)."""

    content: str | list[str | _ContentPart] | None = None


class _ReadFields(msgspec.Struct):
    """The fields the proxy reads from a client body, with the types vLLM's OpenAI server accepts; other fields
    pass to the engines unchecked."""

    prompt: str | list[str | int | list[int]] | None = None
    messages: list[_Message] | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    min_tokens: int | None = None
    n: int | None = None


def client_body(raw: bytes) -> dict[str, Any]:
    """The client's JSON body, its fields checked and the proxy's internal fields taken out; BadBody otherwise."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise BadBody(f"the request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody("the request body must be a JSON object")
    try:
        msgspec.convert(body, _ReadFields)
    except msgspec.ValidationError as exc:
        raise BadBody(str(exc)) from None
    for name in INTERNAL_FIELDS:
        body.pop(name, None)
    return body


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
        return "".join(part if isinstance(part, str) else part.get("text", "") for part in content
                       if isinstance(part, (str, dict)))
    return ""


def prefill_body(body: dict[str, Any], kv_transfer_params: dict[str, Any]) -> dict[str, Any]:
    """What P gets: exactly one output token, no streaming, no streaming options, one choice.

    vLLM's connectors hand out kv_transfer_params only for a prefill that ended length-capped. `min_tokens: 1`
    holds back EOS and stop tokens (and stop strings) for that one token, so P cannot end "stopped" on a prompt
    whose first token would be EOS. The client's own min_tokens and ignore_eos are for D."""
    prefill = dict(body)
    prefill["stream"] = False
    prefill.pop("stream_options", None)  # a stream option without stream:true is a 400 on vLLM
    prefill["min_tokens"] = 1
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


def is_whole_answer(body: dict[str, Any], prefill_answer: dict[str, Any]) -> bool:
    """Whether P's one-token answer is all the client asked for: its only choice stopped (EOS, a stop token or a
    stop string), the client wants one choice, and the client set no min_tokens that this stop would break."""
    choices = prefill_answer.get("choices")
    return (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)
            and choices[0].get("finish_reason") == "stop" and (body.get("n") or 1) == 1
            and not body.get("min_tokens"))


def client_answer(body: dict[str, Any], prefill_answer: dict[str, Any]) -> bytes:
    """A whole answer of P (see is_whole_answer) as the client asked for it: the JSON body, or a stream of one
    chunk with the whole choice (plus the usage chunk if asked for) and [DONE]."""
    answer = {key: value for key, value in prefill_answer.items() if key != "kv_transfer_params"}
    if not is_streaming(body):
        return msgspec.json.encode(answer)
    choice = dict(answer["choices"][0])
    chat = "message" in choice
    if chat:  # the whole message is one delta
        choice["delta"] = {key: value for key, value in (choice.pop("message") or {}).items() if value is not None}
    head = {"id": answer.get("id"), "object": "chat.completion.chunk" if chat else "text_completion",
            "created": answer.get("created"), "model": answer.get("model")}
    events = [{**head, "choices": [choice]}]
    if (body.get("stream_options") or {}).get("include_usage") and "usage" in answer:
        events.append({**head, "choices": [], "usage": answer["usage"]})
    return b"".join(b"data: " + msgspec.json.encode(event) + b"\n\n" for event in events) + b"data: [DONE]\n\n"
