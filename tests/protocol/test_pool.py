"""The id pool's sweep scope (twopc/protocol/pool.py): which ids a commit describes, and when it
lists the whole pool instead. Pure: no broker."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from twopc.protocol.pool import (
    MAX_DESCRIBED_IDS,
    batch_pool,
    choose_slot,
    full_sweep_due,
    in_pool,
    transactional_id,
)

partitions = st.integers(min_value=1, max_value=300)
slots = st.integers(min_value=2, max_value=16)
clock = st.integers(min_value=0, max_value=10**13)
interval = st.integers(min_value=0, max_value=10**9)


@given(partitions, slots, st.integers(min_value=0, max_value=10**6),
       st.sets(st.integers(min_value=0, max_value=20), max_size=20))
def test_every_slot_an_attempt_may_take_is_in_its_batchs_pool(
        n: int, k: int, attempt: int, busy: set[int]) -> None:
    pool = batch_pool("q", n, k)
    assert len(pool) == len(set(pool)) == n * k
    assert all(in_pool("q", t) for t in pool)
    for p in {0, n // 2, n - 1}:
        in_use = {transactional_id("q", p, s) for s in busy}
        slot = choose_slot("q", p, attempt, k, in_use)
        assert slot is None or transactional_id("q", p, slot) in pool
    assert transactional_id("q", n, 0) not in pool  # a later partition is another batch's


@given(partitions, slots, clock, clock, interval)
def test_without_the_batchs_partitions_or_a_listing_the_whole_pool_is_listed(
        n: int, k: int, last: int, now: int, every: int) -> None:
    assert full_sweep_due(None, k, last, now, every)
    assert full_sweep_due(n, k, None, now, every)


@given(partitions, slots, clock, clock, interval)
def test_the_pool_is_described_only_within_the_interval_and_the_size_bound(
        n: int, k: int, last: int, now: int, every: int) -> None:
    due = full_sweep_due(n, k, last, now, every)
    if n * k > MAX_DESCRIBED_IDS or now < last:
        assert due
    else:
        assert due is (now - last >= every)


@given(partitions, slots, clock)
def test_an_interval_of_zero_lists_at_every_commit(n: int, k: int, now: int) -> None:
    assert full_sweep_due(n, k, now, now, 0)
