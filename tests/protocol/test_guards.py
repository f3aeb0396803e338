"""The check before the intent and the start-time checks (pure parts)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.protocol.strategies import handles
from twopc.control import TransactionDescription, TxnState
from twopc.driver.startup_guards import (
    check_timeout,
    max_trigger_interval_ms,
    trigger_interval_problem,
)
from twopc.errors import UnsupportedBroker
from twopc.protocol.clock import (
    CLOCK_TOLERANCE_MS,
    check_before_intent,
    coordinator_now,
    estimate_clock,
)
from twopc.protocol.handle import Handle


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


def _previous_estimate(handles: list[Handle], now: int) -> int:
    """The skew as estimated before issue #17 (item 6): every writer's reading taken as evidence."""
    return (max(0, max(h.writer_clock_ms for h in handles) - now)
            + max(0, max(h.start_ms - h.writer_clock_ms for h in handles)))


@given(st.lists(handles(), min_size=1, max_size=4), st.integers(-90000, 90000))
def test_writers_within_what_their_coordinator_allows_count_as_before(
        hs: list[Handle], offset: int) -> None:
    """A writer whose reading lies between its transaction's start and the latest the coordinator's
    clock can have read then (start + the writer's own elapsed time) weighs exactly as before."""
    inside = [replace(h, writer_clock_ms=min(h.writer_clock_ms, h.start_ms + (
        h.writer_elapsed_ms if h.writer_elapsed_ms is not None else h.timeout_ms))) for h in hs]
    now = inside[0].start_ms + offset
    est = estimate_clock(inside, now)
    assert est.skew_ms == _previous_estimate(inside, now)
    assert est.coordinator_now_ms == now + est.skew_ms and est.ahead == ()


@given(handles(), st.integers(0, 5000), st.integers(CLOCK_TOLERANCE_MS + 1, 10_000_000),
       st.integers(0, 70000), st.integers(0, 10000), st.sampled_from([None, "exec-7"]))
def test_a_writer_clock_ahead_of_its_coordinator_is_bounded_and_named(
        h: Handle, elapsed: int, ahead: int, since_start: int, margin: int,
        host: str | None) -> None:
    """Issue #17, item 6: one executor's clock far ahead must not leave every batch without time.
    Its reading counts only up to the latest the coordinator's clock can have read at that moment,
    and the estimate names it."""
    at_edge = replace(h, writer_elapsed_ms=elapsed, writer_host=host,
                      writer_clock_ms=h.start_ms + elapsed)
    skewed = replace(at_edge, writer_clock_ms=at_edge.writer_clock_ms + ahead)
    now = h.start_ms + since_start
    described = {h.transactional_id: _ongoing(h)}
    assert estimate_clock([skewed], now).skew_ms == estimate_clock([at_edge], now).skew_ms
    assert (check_before_intent([skewed], described, now, margin)
            == check_before_intent([at_edge], described, now, margin))
    (warning,) = estimate_clock([skewed], now).ahead
    assert f"at least {ahead} ms ahead" in warning and h.transactional_id in warning
    assert (f"host {host!r}" if host else "host not recorded") in warning


def test_a_guard_failure_from_clock_evidence_names_the_executor() -> None:
    h = Handle("q-0-0", 1, 0, (), 1, "c", start_ms=1_000_000, timeout_ms=60000, task_partition=0,
               attempt=0, writer_clock_ms=1_000_000 - 70000, writer_host="exec-3",
               writer_elapsed_ms=200)
    # The executor's clock is 70 s behind the driver's and the coordinator's: from the handle that
    # looks the same as a coordinator clock 70 s ahead of both, which leaves no time.
    now = h.start_ms + 500
    failed = check_before_intent([h], {h.transactional_id: _ongoing(h)}, now, 2000)
    assert "estimated clock skew 70000 ms" in failed["q-0-0"]
    assert "host 'exec-3'" in failed["q-0-0"] and "NTP" in failed["q-0-0"]
    # without skew evidence the reason says nothing of clocks
    plain = replace(h, writer_clock_ms=h.start_ms + 100)
    late = h.start_ms + 59000
    assert "host" not in check_before_intent([plain], {h.transactional_id: _ongoing(h)}, late,
                                             2000)["q-0-0"]


def test_timeout_within_broker_maximum() -> None:
    check_timeout(60000, 900000)
    check_timeout(60000, None)
    with pytest.raises(UnsupportedBroker, match=r"transaction\.max\.timeout\.ms"):
        check_timeout(1_000_000, 900000)
    with pytest.raises(UnsupportedBroker, match="minimum"):
        check_timeout(500, None)


@given(timeout=st.integers(1000, 900_000), margin=st.integers(0, 10_000),
       trigger=st.integers(1, 2_000_000))
def test_a_trigger_interval_fits_half_the_timeout_and_what_the_margin_leaves(
        timeout: int, margin: int, trigger: int) -> None:
    limit = max_trigger_interval_ms(timeout, margin)
    assert limit <= timeout // 2 and limit <= max(0, timeout - margin)
    problem = trigger_interval_problem(trigger, timeout, margin)
    assert (problem is None) == (trigger <= limit)
    if problem is not None:
        # The fix it names is enough: the timeout it asks for allows the trigger.
        needed = int(problem.split("twopc.transactionTimeoutMs to at least ")[1].split(" ")[0])
        assert trigger_interval_problem(trigger, needed, margin) is None
        assert f"at most {limit} ms" in problem


def test_a_trigger_interval_problem_says_what_to_change() -> None:
    assert trigger_interval_problem(30_000, 60_000, 5000) is None
    text = trigger_interval_problem(40_000, 60_000, 5000)
    assert text is not None and "40000 ms is more than 30000 ms" in text
    assert "processingTime of at most 30000 ms" in text
    assert "twopc.transactionTimeoutMs to at least 80000 ms" in text
    # A margin above half the timeout is what limits the interval then.
    assert max_trigger_interval_ms(8000, 5000) == 3000
