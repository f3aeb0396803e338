"""The stranded check's pure parts (twopc/protocol/holds.py) not covered by test_decisions.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from twopc.protocol.holds import (
    MARKER_WINDOW_BASE_MS,
    acknowledged_in,
    loss_acknowledgment,
    marker_window_s,
)


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


_KEYS = st.lists(st.tuples(st.sampled_from(["q-0", "q-1", "q-2"]), st.integers(0, 3),
                           st.integers(0, 3)), unique=True, max_size=8)


@given(lost=_KEYS, visible=_KEYS)
def test_an_acknowledgment_covers_exactly_the_transactions_proven_lost(
        lost: list[tuple[str, int, int]], visible: list[tuple[str, int, int]]) -> None:
    """What an acknowledgment entry names, read back through the index's plain types (lists):
    exactly the transactions proven lost, never another transaction of the same id (a repair's,
    whose own loss must still be raised)."""
    entry = loss_acknowledgment(lost, "who and why", 1, {k[0]: "aborted" for k in lost})
    stored = {**entry, "keys": [list(k) for k in entry["keys"]]}
    assert acknowledged_in(stored, visible) == frozenset(lost)
    assert entry["ids"] == sorted({k[0] for k in lost})


@given(visible=_KEYS, ids=st.lists(st.sampled_from(["q-0", "q-1", "q-2"]), unique=True))
def test_an_acknowledgment_of_ids_only_covers_every_transaction_of_them(
        visible: list[tuple[str, int, int]], ids: list[str]) -> None:
    """An entry written before acknowledgments named transactions: its ids' visible ones (else
    an upgraded driver raises a loss already handled, which cannot be acknowledged again)."""
    legacy = {"ids": ids, "note": "n", "at_ms": 1, "why": {}}
    assert acknowledged_in(legacy, visible) == {k for k in visible if k[0] in ids}
    assert acknowledged_in(None, visible) == frozenset()
