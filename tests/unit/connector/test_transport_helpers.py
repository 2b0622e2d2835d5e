"""Registration merging and span coalescing, checked byte by byte against a brute-force expansion."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ascend_pd.connector.kv_layout import merge_spans
from ascend_pd.connector.transport import Span, coalesce


def covered(regions) -> set[int]:
    return {byte for start, length in regions for byte in range(start, start + length)}


def byte_map(spans) -> list[tuple[int, int]]:
    return [(s.local + i, s.remote + i) for s in spans for i in range(s.length)]


def test_touching_overlapping_and_nearby_spans_are_registered_once():
    assert merge_spans([(100, 150), (0, 100), (120, 130), (300, 301)], gap=0) == [(0, 150), (300, 1)]
    assert merge_spans([(100, 150), (0, 100), (160, 170), (300, 301)], gap=10) == [(0, 170), (300, 1)]


@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 40)), max_size=12), st.integers(0, 8))
def test_merged_regions_cover_every_span_and_stay_further_apart_than_the_gap(spans, gap):
    spans = [(start, start + length) for start, length in spans]
    merged = merge_spans(spans, gap)
    assert covered((start, end - start) for start, end in spans) <= covered(merged)
    for (a, la), (b, _) in zip(merged, merged[1:]):
        assert a + la + gap < b  # otherwise they would have merged
    # a merged region adds only the gaps it bridged: each of its bytes is in a span or within `gap` of one
    inside = covered((start, end - start + gap) for start, end in spans)
    assert covered(merged) <= inside


def test_contiguous_blocks_move_as_one_copy():
    spans = [Span(1000, 5000, 64), Span(1064, 5064, 64), Span(1128, 9000, 64), Span(1192, 9064, 64)]
    assert coalesce(spans) == [Span(1000, 5000, 128), Span(1128, 9000, 128)]


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 8)), max_size=10))
def test_coalescing_moves_the_same_bytes_to_the_same_places(steps):
    spans, local, remote = [], 0, 0
    for local_gap, remote_gap, length in steps:  # gaps of 0 make runs that must be joined
        local += local_gap
        remote += remote_gap
        spans.append(Span(local, remote, length))
        local += length
        remote += length
    joined = coalesce(spans)
    assert byte_map(joined) == byte_map(spans)
    breaks = sum(1 for a, b in zip(spans, spans[1:]) if (a.local + a.length, a.remote + a.length) != (b.local, b.remote))
    assert len(joined) == (breaks + 1 if spans else 0)
