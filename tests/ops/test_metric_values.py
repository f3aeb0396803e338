"""The exporter's values from the broker's and the log's answers (twopc/ops/metric_values.py): who
pins each partition, how far it holds consumers back, which batch names it, and what the journal
adds; then the metric families, read back through prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from tests.ops.scrape import parse
from twopc.control import TransactionDescription, TransactionListing, TxnState
from twopc.control.partition_messages import ActiveProducer, ProducerState
from twopc.ops.metric_values import (
    INFO_LABELS,
    SAME_CALL_MS,
    JournalFollow,
    LogIndex,
    LogRef,
    PartitionHold,
    Role,
    log_index,
    partition_families,
    partition_holds,
    pinning_producer_ids,
    recovery_observation,
)
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Aborted, Committed, LogRecord, Prepared
from twopc.protocol.owner import Owner
from twopc.protocol.state import fold

NOW = 10_000_000
OWNER = Owner.query("query-1", "q")


def producer(pid: int, start: int, epoch: int = 0) -> ActiveProducer:
    return ActiveProducer(pid, epoch, 3, NOW - 5, -1, start)


@st.composite
def answers(draw: st.DrawFn) -> dict[str, Any]:
    """What the broker answered for a few partitions: offsets (some missing), producers (some
    with a transaction open), listings and descriptions for some of the producer ids."""
    parts = [("t", p) for p in range(draw(st.integers(1, 4)))]
    high: dict[tuple[str, int], int] = {}
    stable: dict[tuple[str, int], int] = {}
    producers: dict[tuple[str, int], ProducerState] = {}
    for tp in parts:
        hw = draw(st.integers(0, 1000))
        if draw(st.booleans()):
            high[tp] = hw
        if draw(st.booleans()):
            stable[tp] = draw(st.integers(0, 1100))  # read after hw: may even be past it
        if draw(st.integers(0, 5)) == 0:
            producers[tp] = ProducerState(*tp, 45, "not leader", ())
        elif draw(st.integers(0, 5)) > 0:
            pids = draw(st.lists(st.integers(1, 6), unique=True, max_size=3))
            producers[tp] = ProducerState(*tp, 0, None, tuple(
                producer(pid, draw(st.sampled_from([-1, *range(0, 50)])), draw(st.integers(0, 2)))
                for pid in pids))
    all_pids = sorted({p.producer_id for s in producers.values() for p in s.producers})
    listed = draw(st.lists(st.sampled_from(all_pids), unique=True)) if all_pids else []
    listings = [TransactionListing(f"tx-{pid}", pid, TxnState.ONGOING, 1) for pid in listed]
    descriptions = {
        t.transactional_id: TransactionDescription(
            t.transactional_id, TxnState.ONGOING,
            t.producer_id if draw(st.integers(0, 4)) else t.producer_id + 100,
            draw(st.integers(0, 2)), draw(st.sampled_from([-1, 60000])),
            draw(st.sampled_from([-1, NOW - 90_000, NOW - 1000, NOW + 500])), ())
        for t in listings if draw(st.booleans())}
    return {"parts": parts, "high": high, "stable": stable, "producers": producers,
            "listings": listings, "descriptions": descriptions}


@given(answers())
def test_each_partition_is_held_back_by_its_oldest_open_transaction(a: dict[str, Any]) -> None:
    holds = partition_holds(a["parts"], a["high"], a["stable"], a["producers"], a["listings"],
                            a["descriptions"], None, NOW)
    assert [(h.topic, h.partition) for h in holds] == sorted(a["parts"])
    for h in holds:
        tp = (h.topic, h.partition)
        hw, lso = a["high"].get(tp), a["stable"].get(tp)
        assert h.holdback == (None if hw is None or lso is None else max(0, hw - lso))
        state = a["producers"].get(tp)
        if state is None or state.error_code != 0:
            assert h.pin is None and h.open_transactions is None
            assert h.error is not None and "DescribeProducers" in h.error
            continue
        opened = [p for p in state.producers if p.current_txn_start_offset >= 0]
        assert h.open_transactions == len(opened)
        if not opened:
            assert h.pin is None
            continue
        pin = h.pin
        assert pin is not None
        oldest = min(p.current_txn_start_offset for p in opened)
        assert pin.first_offset == oldest
        assert any(p.producer_id == pin.producer_id and p.producer_epoch == pin.producer_epoch
                   and p.current_txn_start_offset == oldest for p in opened)
        listing = next((t for t in a["listings"] if t.producer_id == pin.producer_id), None)
        assert pin.transactional_id == (listing.transactional_id if listing else None)
        desc = a["descriptions"].get(pin.transactional_id or "")
        if desc is not None and desc.producer_id == pin.producer_id and desc.start_ms > 0:
            assert pin.age_ms == max(0, NOW - desc.start_ms)
        else:
            assert pin.age_ms is None and pin.age_ratio is None  # never faked
        assert pin.role is Role.UNKNOWN and (pin.owner, pin.batch) == ("", "")
    pinning = {h.pin.producer_id for h in holds if h.pin is not None}
    assert set(pinning_producer_ids(a["producers"])) == pinning


@given(answers())
def test_the_families_read_back_as_the_holds_say(a: dict[str, Any]) -> None:
    holds = partition_holds(a["parts"], a["high"], a["stable"], a["producers"], a["listings"],
                            a["descriptions"], None, NOW)
    samples = scrape(holds)
    for h in holds:
        where = (("partition", str(h.partition)), ("topic", h.topic))
        assert samples.get(("twopc_partition_lso_holdback_records", where)) == h.holdback
        assert samples.get(("twopc_partition_open_transactions", where)) == h.open_transactions
        pin = h.pin
        age = samples.get(("twopc_open_transaction_age_seconds", where))
        assert age == (None if pin is None or pin.age_ms is None else pin.age_ms / 1000)
    infos = {k: v for k, v in samples.items() if k[0] == "twopc_open_transaction_info"}
    assert len(infos) == sum(h.pin is not None for h in holds)
    assert all(v == 1 for v in infos.values())
    for (name, labels), _ in samples.items():
        # Only the info metric carries ids; no metric carries an offset as a label.
        allowed = set(INFO_LABELS) if name == "twopc_open_transaction_info" else {"topic",
                                                                                   "partition"}
        assert {k for k, _ in labels} <= allowed


def scrape(holds: list[PartitionHold]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The holds' families as Prometheus text, parsed back: (sample name, labels) -> value."""
    class Once:
        def collect(self) -> Any:
            return partition_families(holds)

    registry = CollectorRegistry()
    registry.register(Once())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for s in parse(generate_latest(registry).decode())}


def handle(tid: str, pid: int, epoch: int, p: int = 0) -> Handle:
    return Handle(tid, pid, epoch, (PartitionSpan("t", 0, 10, None, 5),), 5, "c", NOW - 2000,
                  60000, p, 0, NOW - 1000)


def test_the_log_names_the_batch_and_what_became_of_it() -> None:
    done, pending, refused = handle("q-0-0", 1, 0), handle("q-1-0", 2, 0), handle("q-2-1", 3, 4, 2)
    fenced = handle("q-3-0", 4, 0, 3)
    records: list[tuple[int, LogRecord]] = [(0, Prepared("7", (done,))), (1, Committed("7", 0, ())),
               (2, Prepared("8", (fenced,))), (3, Aborted("8", (fenced,), "guard", 2)),
               (4, Aborted("8", (refused,), "re-run refused", None)),
               (5, Prepared("9", (pending,)))]
    index = log_index(OWNER, records, fold(records))
    assert index.by_producer[(1, 0)] == LogRef("q-0-0", "7", Role.COMMITTED, NOW - 2000, 60000)
    assert index.by_producer[(2, 0)].role is Role.PENDING and index.by_producer[(2, 0)].batch == "9"
    assert index.by_producer[(3, 4)].role is Role.RECORDED
    assert index.by_producer[(4, 0)].role is Role.RECORDED
    assert index.find(2, 0, "q-1-0") == ("query-1", "9", Role.PENDING)
    assert index.find(2, 0, None) == ("query-1", "9", Role.PENDING)  # the coordinator did not say
    assert index.find(2, 1, "q-1-0") == ("query-1", "", Role.POOL)  # another epoch: not recorded
    assert index.find(9, 0, "q-5-1") == ("query-1", "", Role.POOL)  # a task writing, or an orphan
    assert index.find(9, 0, "q1-5-1") == ("", "", Role.OTHER)  # another prefix's pool
    assert index.find(9, 0, None) == ("", "", Role.OTHER)


def test_a_pinning_transaction_takes_the_log_s_batch_and_its_recorded_times() -> None:
    tp = ("t", 0)
    index = LogIndex(OWNER, {(2, 0): LogRef("q-1-0", "9", Role.PENDING, NOW - 30_000, 60000)})
    producers = {tp: ProducerState("t", 0, 0, None, (producer(2, 10), producer(5, 12)))}
    # ListTransactions did not name producer 2 (its coordinator did not answer): the log does.
    [held] = partition_holds([tp], {tp: 20}, {tp: 10}, producers, [], {}, index, NOW)
    assert held.holdback == 10 and held.open_transactions == 2
    pin = held.pin
    assert pin is not None
    assert (pin.transactional_id, pin.batch, pin.owner, pin.role) == ("q-1-0", "9", "query-1",
                                                                      Role.PENDING)
    assert (pin.age_ms, pin.timeout_ms, pin.age_ratio) == (30_000, 60000, 0.5)
    # The coordinator's description, when it holds that producer id, wins over the record.
    desc = {"q-1-0": TransactionDescription("q-1-0", TxnState.PREPARE_COMMIT, 2, 0, 90000,
                                            NOW - 45_000, (tp,))}
    listing = [TransactionListing("q-1-0", 2, TxnState.ONGOING, 1)]
    [held] = partition_holds([tp], {tp: 20}, {tp: 10}, producers, listing, desc, index, NOW)
    assert held.pin is not None
    assert (held.pin.state, held.pin.age_ms, held.pin.timeout_ms) == ("PrepareCommit", 45_000, 90000)


def entry(batch: str, at_ms: int, outcome: str = "committed", event: str = "commit",
          recovery: dict[str, Any] | None = None) -> dict[str, Any]:
    figures = {"event": event, "batch": batch, "outcome": outcome, "records": 5,
               "transactions": 1, "committed_transactions": 1, "commit_latency_ms": 250.0,
               "oldest_txn_age_ms": 100, "oldest_txn_timeout_ms": 1000,
               "oldest_txn_age_ratio": 0.1}
    return {"format": 1, "owner_id": "query-1", "at_ms": at_ms, "figures": figures,
            "metrics": {}, "recovery": recovery}


def summary(where: str = "commit", **kw: object) -> dict[str, Any]:
    return {"event": "recovery_report", "where": where, "acted": True, "summary": "s",
            "batches": {}, "rolled_forward": [], "orphans_fenced": [], "fence_failures": {},
            "stranded_released": [], "stranded_unreleased": [], "undecided": [],
            "lost_partitions": {}, **kw}


def test_the_journal_counts_each_entry_once_and_only_what_came_after_the_start() -> None:
    follow = JournalFollow(since_ms=1000, recent=2)
    records: list[tuple[int, LogRecord]] = [
        (0, Prepared("0", (handle("q-0-0", 1, 0),))), (1, Committed("0", 0, ())),
        (2, Prepared("1", (handle("q-0-1", 1, 1),))), (3, Committed("1", 2, ()))]
    assert follow.batches_to_read(fold(records[:2])) == ["0"]
    assert follow.batches_to_read(fold(records)) == ["1", "0"]  # changed, then the recent ones
    late = JournalFollow(since_ms=1000, recent=1)  # started on a log with batches: the last only
    assert late.batches_to_read(fold(records)) == ["1"]
    more = [*records, (4, Prepared("2", (handle("q-0-0", 1, 2),))), (5, Committed("2", 4, ()))]
    assert late.batches_to_read(fold(more)) == ["2"]
    assert follow.take_batch("0", "commit", entry("0", 999)) is None  # before the start
    obs = follow.take_batch("1", "commit", entry("1", 1500))
    assert obs is not None and (obs.batch, obs.outcome, obs.latency_s) == ("1", "committed", 0.25)
    assert follow.take_batch("1", "commit", entry("1", 1500)) is None  # read again: counted
    again = follow.take_batch("1", "commit", entry("1", 1600, "GuardFailed"))  # a retried commit
    assert again is not None and again.outcome == "GuardFailed"
    assert follow.take_batch("1", "abort", entry("1", 1600, "fenced", "abort")) is not None


def test_a_recovery_counts_once_from_the_file_or_from_its_batch_entry() -> None:
    follow = JournalFollow(since_ms=1000)
    first = summary("prepare", batches={"3": "committed"}, rolled_forward=["q-0-0", "q-1-0"])
    obs = follow.take_recovery("query-1", first, 2000, in_entry=False)
    assert obs is not None and obs.where == "prepare" and obs.batch_outcomes == ("committed",)
    assert dict(obs.actions) == {"rolled_forward": 2}
    assert follow.take_recovery("query-1", first, 2000, in_entry=False) is None  # read again
    # The batch entry of the same call holds a copy, written a moment later: not counted again.
    assert follow.take_recovery("query-1", first, 2050, in_entry=True) is None
    # A second recovery overwrote recovery.json before it was read: its batch entry counts it.
    second = summary("commit", orphans_fenced=["q-2-0"])
    obs = follow.take_recovery("query-1", second, 5000, in_entry=True)
    assert obs is not None and dict(obs.actions) == {"orphan_fenced": 1}
    assert follow.take_recovery("query-1", second, 4990, in_entry=False) is None  # then the file
    # The same content much later is another recovery.
    assert follow.take_recovery("query-1", second, 5000 + SAME_CALL_MS + 1, in_entry=True)
    # One that did nothing, or came before the start, is not counted.
    assert follow.take_recovery("query-1", summary(acted=False), 9000, in_entry=False) is None
    assert follow.take_recovery("query-1", first, 999, in_entry=False) is None


@given(st.dictionaries(st.sampled_from(["rolled_forward", "orphans_fenced", "stranded_released",
                                        "stranded_unreleased"]),
                       st.lists(st.text(min_size=1, max_size=5), max_size=4)),
       st.dictionaries(st.text(max_size=3), st.sampled_from(["committed", "aborted", "partial"]),
                       max_size=3))
def test_recovery_actions_count_the_transactions(ids: dict[str, list[str]],
                                                 batches: dict[str, str]) -> None:
    obs = recovery_observation("o", summary("commit", batches=batches, **ids), 5)
    assert obs is not None
    assert sorted(obs.batch_outcomes) == sorted(batches.values())
    assert sum(obs.actions.values()) == sum(len(v) for v in ids.values())
    assert all(n > 0 for n in obs.actions.values())
