"""The circuit breaker's states over time, the request rewrites for P and D, and P's whole answer for the client."""

import msgspec
import pytest

from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.openai_body import (client_answer, client_body, decode_body, is_whole_answer, prefill_body,
                                        prompt_text)
from ascend_pd.proxy.tokens import EstimatedTokens


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_breaker_opens_after_consecutive_failures_and_half_opens_after_the_cool_down():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, open_seconds=10, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.allows_requests()
    breaker.record_failure()
    assert breaker.state == "open" and not breaker.allows_requests()
    clock.now += 10
    assert breaker.state == "half-open" and breaker.allows_requests()
    breaker.record_failure()  # one failure while half-open re-opens at once
    assert breaker.state == "open"
    clock.now += 10
    breaker.record_success()
    assert breaker.state == "closed"


def test_a_success_resets_the_failure_count():
    breaker = CircuitBreaker(failure_threshold=2, open_seconds=10, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_prefill_body_caps_output_and_drops_streaming_options_without_touching_the_original():
    original = {"prompt": "p", "stream": True, "stream_options": {"include_usage": True}, "min_tokens": 4,
                "max_tokens": 100, "max_completion_tokens": 100, "n": 3, "temperature": 0.5}
    rewritten = prefill_body(original, {"do_remote_decode": True})
    assert rewritten == {"prompt": "p", "stream": False, "min_tokens": 1, "max_tokens": 1,
                         "max_completion_tokens": 1, "n": 1, "temperature": 0.5,
                         "kv_transfer_params": {"do_remote_decode": True}}
    assert original["max_tokens"] == 100 and original["min_tokens"] == 4 and "kv_transfer_params" not in original


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("request_body", [
    {"prompt": "p"},  # no cap at all
    {"prompt": "p", "max_tokens": 50, "min_tokens": 0, "stream": True},
    {"prompt": [1, 2, 3], "max_tokens": 50, "min_tokens": 7, "ignore_eos": True},
    {**CHAT, "max_tokens": 50},
    {**CHAT, "max_completion_tokens": 50, "ignore_eos": False, "stream": True},
    {**CHAT, "max_tokens": 50, "max_completion_tokens": 50, "min_tokens": 3},
])
def test_prefill_body_asks_for_exactly_one_token_so_prefill_always_ends_length_capped(request_body):
    """vLLM's connectors return kv_transfer_params only for a prefill that ended length-capped: min_tokens 1 keeps
    EOS from ending it first. The client's own min_tokens and ignore_eos are for D."""
    to_prefill = prefill_body(request_body, {"do_remote_decode": True})
    assert to_prefill["min_tokens"] == 1 and to_prefill["max_tokens"] == 1 and to_prefill["stream"] is False
    if "max_completion_tokens" in request_body:
        assert to_prefill["max_completion_tokens"] == 1
    assert to_prefill.get("ignore_eos") == request_body.get("ignore_eos")
    to_decode = decode_body(request_body, {"do_remote_prefill": True})
    assert to_decode.get("min_tokens") == request_body.get("min_tokens")
    assert to_decode.get("max_tokens") == request_body.get("max_tokens")


STOPPED = {"id": "cmpl-1", "object": "text_completion", "created": 5, "model": "m", "kv_transfer_params": None,
           "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
STOPPED_CHAT = {"id": "chatcmpl-1", "object": "chat.completion", "created": 5, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "", "reasoning_content": None},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def test_a_prefill_answer_is_the_whole_answer_only_if_it_stopped_and_the_client_wanted_no_more():
    assert is_whole_answer({"prompt": "p"}, STOPPED)
    assert is_whole_answer({**CHAT, "n": 1, "min_tokens": 0}, STOPPED_CHAT)
    capped = {**STOPPED, "choices": [{**STOPPED["choices"][0], "text": " w1", "finish_reason": "length"}]}
    assert not is_whole_answer({"prompt": "p"}, capped)  # P's one token is only the start
    assert not is_whole_answer({"prompt": "p", "n": 2}, STOPPED)  # P sampled one choice of two
    assert not is_whole_answer({"prompt": "p", "min_tokens": 2}, STOPPED)  # the client wants more than EOS
    assert not is_whole_answer({"prompt": "p"}, {"choices": []})


def test_a_whole_prefill_answer_is_sent_as_json_or_as_the_stream_the_client_asked_for():
    assert msgspec.json.decode(client_answer({"prompt": "p"}, STOPPED)) == {
        key: value for key, value in STOPPED.items() if key != "kv_transfer_params"}
    stream = client_answer({"prompt": "p", "stream": True, "stream_options": {"include_usage": True}}, STOPPED)
    events = stream.split(b"\n\n")
    assert events[-2:] == [b"data: [DONE]", b""]
    chunk, usage = (msgspec.json.decode(event.removeprefix(b"data: ")) for event in events[:-2])
    assert chunk["object"] == "text_completion" and chunk["id"] == "cmpl-1"
    assert chunk["choices"] == [{"index": 0, "text": "", "logprobs": None, "finish_reason": "stop",
                                 "stop_reason": None}]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 1
    chat = client_answer({**CHAT, "stream": True}, STOPPED_CHAT).split(b"\n\n")
    assert len(chat) == 3  # one chunk, no usage chunk unless asked for, [DONE]
    chunk = msgspec.json.decode(chat[0].removeprefix(b"data: "))
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                 "finish_reason": "stop"}]


def test_decode_body_keeps_the_request_and_adds_the_params():
    original = {"prompt": "p", "stream": True, "max_tokens": 9}
    assert decode_body(original, {"x": 1}) == {**original, "kv_transfer_params": {"x": 1}}


def test_prompt_text_of_chat_messages_and_content_parts():
    body = {"messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "hi "},
                                                      {"type": "image_url", "image_url": {"url": "data:..."}},
                                                      {"type": "text", "text": "there"}]}]}
    assert prompt_text(body) == "be brief\nhi there"


def test_estimated_tokens_round_up_a_quarter_of_the_characters():
    assert [EstimatedTokens().count("x" * n) for n in (0, 1, 4, 5, 400)] == [0, 1, 1, 2, 100]


def test_a_clients_own_kv_transfer_params_are_dropped_and_the_rest_of_its_body_kept():
    """Only the proxy tells P and D where KV is: a client's coordinates would have D read from any host it names."""
    forged = {"do_remote_prefill": True, "remote_host": "attacker.example", "remote_port": 6666}
    raw = msgspec.json.encode({"model": "m", "prompt": "hi", "max_tokens": 3, "kv_transfer_params": forged})
    assert client_body(raw) == {"model": "m", "prompt": "hi", "max_tokens": 3}
