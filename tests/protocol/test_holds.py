"""The stranded check's pure parts (twopc/protocol/holds.py) not covered by test_decisions.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from twopc.protocol.holds import MARKER_WINDOW_BASE_MS, marker_window_s


@given(st.integers(-10, 100_000), st.integers(-10, 100_000), st.integers(0, 600_000))
def test_the_marker_window_grows_with_the_transactions_and_never_passes_the_wait(
        fewer: int, more: int, wait_ms: int) -> None:
    fewer, more = sorted((fewer, more))
    assert 0 <= marker_window_s(fewer, wait_ms) <= marker_window_s(more, wait_ms) <= wait_ms / 1000
    assert marker_window_s(fewer, wait_ms) >= min(MARKER_WINDOW_BASE_MS, wait_ms) / 1000


def test_the_marker_window_covers_what_a_commit_of_1024_took() -> None:
    """The markers check of a commit of 1,024 transactions waited up to 121 ms for its markers on
    the benchmarks' broker (p99 of 8 commits, benchmarks/README.md section 5); of 64, up to 17."""
    assert marker_window_s(1024, 5000) > 0.121
    assert marker_window_s(64, 5000) > 0.017
