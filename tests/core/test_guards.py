"""The check before the intent and the start-time checks (pure parts)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.core.strategies import handles
from twopc.control import TransactionDescription, TxnState
from twopc.errors import UnsupportedBroker
from twopc.guards import check_before_intent, check_timeout, coordinator_now
from twopc.handle import Handle


def _ongoing(h: Handle) -> TransactionDescription:
    return TransactionDescription(h.transactional_id, TxnState.ONGOING, h.producer_id, h.epoch,
                                  h.timeout_ms, h.start_ms, ())


@given(handles(), st.integers(0, 70000), st.integers(0, 10000))
def test_time_left_against_margin(h: Handle, elapsed: int, margin: int) -> None:
    h = replace(h, writer_clock_ms=h.start_ms + 10)  # no skew evidence
    now = h.start_ms + elapsed
    failed = check_before_intent([h], {h.transactional_id: _ongoing(h)}, now, margin)
    left = h.start_ms + h.timeout_ms - now
    assert (h.transactional_id in failed) == (left <= margin)


@given(handles(), st.integers(1, 20000), st.integers(0, 5000))
def test_skew_evidence_only_shortens_the_time_left(h: Handle, ahead: int, margin: int) -> None:
    # The coordinator's start time is after the writer's reading: its clock is ahead.
    skewed = replace(h, writer_clock_ms=h.start_ms - ahead)
    now = skewed.writer_clock_ms + 5
    est, skew = coordinator_now([skewed], now)
    assert skew >= ahead and est >= now + ahead
    plain = check_before_intent([replace(skewed, writer_clock_ms=h.start_ms)],
                                {h.transactional_id: _ongoing(h)}, now, margin)
    with_skew = check_before_intent([skewed], {h.transactional_id: _ongoing(h)}, now, margin)
    assert set(plain) <= set(with_skew)


@given(handles(), st.sampled_from([s for s in TxnState if s is not TxnState.ONGOING]))
def test_only_ongoing_with_the_recorded_epoch_passes(h: Handle, state: TxnState) -> None:
    h = replace(h, writer_clock_ms=h.start_ms)  # no skew: the whole timeout is left
    now = h.start_ms
    d = _ongoing(h)
    assert check_before_intent([h], {h.transactional_id: d}, now, 0) == {}
    assert h.transactional_id in check_before_intent(
        [h], {h.transactional_id: replace(d, state=state)}, now, 0)
    zombie = replace(d, producer_epoch=h.epoch + 1)
    assert "zombie" in check_before_intent([h], {h.transactional_id: zombie}, now, 0)[
        h.transactional_id]
    assert h.transactional_id in check_before_intent([h], {}, now, 0)


def test_timeout_within_broker_maximum() -> None:
    check_timeout(60000, 900000)
    check_timeout(60000, None)
    with pytest.raises(UnsupportedBroker, match=r"transaction\.max\.timeout\.ms"):
        check_timeout(1_000_000, 900000)
    with pytest.raises(UnsupportedBroker, match="minimum"):
        check_timeout(500, None)
