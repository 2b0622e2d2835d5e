"""The workload window's pieces: token events counted across chunk edges, the window's edges, the summary."""

from ascend_pd.proxy.workload_window import (EventCounter, RequestSample, WorkloadWindow,
                                             completion_tokens, summarise)


def test_events_split_across_chunks_count_once():
    stream = b"".join(b'data: {"t": %d}\n\n' % i for i in range(7)) + b"data: [DONE]\n\n"
    for cut in range(1, len(stream)):
        counter = EventCounter()
        counter.feed(stream[:cut])
        counter.feed(stream[cut:])
        assert counter.tokens() == 7, cut


USAGE_EVENT = (b'data: {"id":"c","object":"text_completion","choices":[],'
               b'"usage":{"prompt_tokens":5,"completion_tokens":12}}\n\n')


def test_the_usage_event_gives_the_token_count_and_is_taken_out_when_the_proxy_asked_for_it():
    # with MTP one event carries every token a step accepted: 4 events here, 12 tokens
    events = b"".join(b'data: {"choices":[{"text":"abc"}]}\n\n' for _ in range(4))
    for strip in (True, False):
        counter = EventCounter(strip_usage=strip)
        passed = counter.feed(events) + counter.feed(USAGE_EVENT + b"data: [DONE]\n\n")
        assert counter.tokens() == 12
        assert (USAGE_EVENT in passed) is not strip and passed.endswith(b"data: [DONE]\n\n")
        assert passed.replace(USAGE_EVENT, b"") == events + b"data: [DONE]\n\n"


def test_a_usage_event_split_over_two_reads_passes_through_whole():
    counter = EventCounter(strip_usage=True)
    cut = len(USAGE_EVENT) // 2
    passed = counter.feed(USAGE_EVENT[:cut]) + counter.feed(USAGE_EVENT[cut:])
    assert passed == USAGE_EVENT


def test_a_whole_answer_gives_its_usage_or_nothing():
    assert completion_tokens(b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}') == 9
    assert completion_tokens(b'{"choices": []}') == -1 and completion_tokens(b"not json") == -1


def test_the_rate_counts_arrivals_not_ends_and_old_ones_leave():
    now = [1000.0]
    window = WorkloadWindow(10.0, clock=lambda: now[0])
    for i in range(30):  # 3 req/s for 10 s, each still running when it is summarised
        now[0] = 1000.5 + i / 3
        window.arrive()
    now[0] = 1010.3
    window.add(RequestSample(now[0] - 1, 100, 20, 0.5, 0.02, True))
    contents = window.snapshot()
    summary = summarise([contents], 10.0, now[0], [])
    assert summary["rate_rps"] == 3.0 and summary["finished"] == 1 and summary["requests"] == 30
    now[0] += 20
    emptied = window.snapshot()
    assert emptied.arrivals == [] and emptied.finished == []



def test_a_worker_started_again_adds_its_own_rate_and_the_window_says_it_is_partial():
    """Two workers at 2 req/s each; the second was started again 5 s before the summary (its earlier arrivals are
    gone with it). Today's 4 req/s, not the 8 its 5 s span over both workers' arrivals gave, nor the 3 of a span
    of the whole window."""
    now = [1000.0]
    steady, restarted = WorkloadWindow(60.0, clock=lambda: now[0]), None
    for i in range(240):  # 0.5 s apart: 2 req/s for 120 s
        now[0] = 1000.0 + i / 2
        steady.arrive()
        if now[0] == 1115.0:
            restarted = WorkloadWindow(60.0, clock=lambda: now[0])
        if restarted is not None:
            restarted.arrive()
    now[0] = 1120.0
    summary = summarise([steady.snapshot(), restarted.snapshot()], 60.0, now[0], [])
    assert abs(summary["rate_rps"] - 4.0) < 0.1, summary["rate_rps"]
    assert summary["partial"] is True
    alone = summarise([steady.snapshot()], 60.0, now[0], [])
    assert abs(alone["rate_rps"] - 2.0) < 0.05 and alone["partial"] is False
