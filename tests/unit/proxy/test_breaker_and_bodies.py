"""The circuit breaker's states over time, and the request rewrites for P and D."""

from ascend_pd.proxy.breaker import CircuitBreaker
from ascend_pd.proxy.openai_body import decode_body, prefill_body, prompt_text
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
    assert rewritten == {"prompt": "p", "stream": False, "max_tokens": 1, "max_completion_tokens": 1, "n": 1,
                         "temperature": 0.5, "kv_transfer_params": {"do_remote_decode": True}}
    assert original["max_tokens"] == 100 and "kv_transfer_params" not in original


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
