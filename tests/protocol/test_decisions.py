"""The decision table (twopc/protocol), exhaustively and with hypothesis. Pure: no broker."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.protocol.strategies import batch_handles, handles
from twopc.control import (
    EndTxnOutcome,
    LogCheckResult,
    LogOutcome,
    OutcomeKind,
    TransactionDescription,
    TxnState,
    UnknownReason,
)
from twopc.errors import InconsistentLog
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import (
    Aborted,
    Committed,
    Duplicates,
    LogRecord,
    Orphans,
    Partial,
    Prepared,
    Released,
    Resolved,
    RollForward,
    Stranded,
    from_body,
    to_body,
)
from twopc.protocol.plans import (
    CommitAction,
    job_state,
    plan_abort,
    plan_commit,
    plan_purge,
    plan_repair,
    purge_below,
    unnamed_open,
)
from twopc.protocol.pool import choose_slot, in_pool, transactional_id
from twopc.protocol.state import BatchState, BatchStatus, fold
from twopc.protocol.verdicts import (
    BatchOutcome,
    Fate,
    Verdict,
    batch_outcome,
    combine_spans,
    fate_of_end_txn,
    fate_of_log_check,
    pass1,
)

# ---- pass 1: every coordinator state, with and without the recorded pid/epoch -------------------

PASS1 = {
    TxnState.ONGOING: Fate.ROLL_FORWARD,
    TxnState.PREPARE_COMMIT: Fate.COMMITTED,
    TxnState.COMPLETE_COMMIT: Fate.COMMITTED,
    TxnState.PREPARE_ABORT: Fate.ABORTED,
    TxnState.COMPLETE_ABORT: Fate.ABORTED,
    TxnState.EMPTY: Fate.UNDECIDED,
    TxnState.PREPARE_EPOCH_FENCE: Fate.UNDECIDED,
    TxnState.DEAD: Fate.UNDECIDED,
    TxnState.UNKNOWN_ID: Fate.UNDECIDED,
}


def _desc(h: Handle, state: TxnState, pid: int, epoch: int) -> TransactionDescription:
    return TransactionDescription(h.transactional_id, state, pid, epoch, h.timeout_ms, h.start_ms,
                                  ())


def test_pass1_table_covers_every_state() -> None:
    assert set(PASS1) == set(TxnState)


@given(handles(), st.sampled_from(list(TxnState)), st.integers(0, 2), st.integers(0, 2))
def test_pass1(h: Handle, state: TxnState, dpid: int, depoch: int) -> None:
    pid, epoch = h.producer_id + dpid, h.epoch + depoch
    verdict = pass1(h, _desc(h, state, pid, epoch))
    if (dpid, depoch) == (0, 0):
        assert verdict.fate is PASS1[state]
    else:  # a newer producer id or epoch proves nothing about ours: the log decides
        assert verdict.fate is Fate.UNDECIDED
        assert "not the recorded" in verdict.reason or state is TxnState.UNKNOWN_ID
    assert pass1(h, None).fate is Fate.UNDECIDED


def test_end_txn_outcomes() -> None:
    table = {
        OutcomeKind.COMMITTED: Fate.COMMITTED,
        OutcomeKind.ALREADY_COMMITTED: Fate.COMMITTED,
        OutcomeKind.ABORTED: Fate.ABORTED,
        OutcomeKind.ALREADY_ABORTED: Fate.ABORTED,
    }
    for kind in OutcomeKind:  # every other answer goes to the log check, never to "lost"
        verdict = fate_of_end_txn(EndTxnOutcome("t", kind, "SOME_ERROR"))
        assert verdict.fate is table.get(kind, Fate.UNDECIDED), kind
    assert fate_of_end_txn(None).fate is Fate.UNDECIDED


def test_log_check_outcomes() -> None:
    assert fate_of_log_check(LogCheckResult(LogOutcome.COMMITTED)).fate is Fate.COMMITTED
    assert fate_of_log_check(LogCheckResult(LogOutcome.ABORTED)).fate is Fate.ABORTED
    assert fate_of_log_check(LogCheckResult(LogOutcome.NOT_YET_STABLE)).fate is Fate.WAIT
    for reason in UnknownReason:
        v = fate_of_log_check(LogCheckResult(LogOutcome.UNKNOWN, reason))
        assert v.fate is Fate.UNKNOWN and reason.value in v.reason


@given(st.lists(st.sampled_from([Fate.COMMITTED, Fate.ABORTED, Fate.WAIT, Fate.UNKNOWN]),
                min_size=1, max_size=4))
def test_combine_spans(fates: list[Fate]) -> None:
    v = combine_spans([Verdict(f, f.value) for f in fates])
    decisive = [f for f in fates if f in (Fate.COMMITTED, Fate.ABORTED)]
    if decisive:
        assert v.fate is decisive[0]
    elif Fate.WAIT in fates:
        assert v.fate is Fate.WAIT
    else:
        assert v.fate is Fate.UNKNOWN


@given(st.dictionaries(st.text(min_size=1, max_size=3),
                       st.sampled_from([Fate.COMMITTED, Fate.ABORTED, Fate.UNKNOWN, Fate.WAIT,
                                        Fate.UNDECIDED]), max_size=6))
def test_batch_outcome(fates: dict[str, Fate]) -> None:
    out = batch_outcome({t: Verdict(f) for t, f in fates.items()})
    values = set(fates.values())
    if values - {Fate.COMMITTED, Fate.ABORTED}:
        assert out is BatchOutcome.UNDECIDED  # any doubt stops: never guessed
    elif values == {Fate.COMMITTED, Fate.ABORTED}:
        assert out is BatchOutcome.PARTIAL
    elif values == {Fate.ABORTED}:
        assert out is BatchOutcome.ABORTED
    else:
        assert out is BatchOutcome.COMMITTED


# ---- repair of a partly committed batch ---------------------------------------------------------


@given(batch_handles(), batch_handles(), st.data())
def test_plan_repair(old: tuple[Handle, ...], rerun: tuple[Handle, ...], data: st.DataObject) -> None:
    visible = {h.task_partition: h for h in old if data.draw(st.booleans())}
    plan = plan_repair(visible, rerun)
    assert plan.action is CommitAction.REPAIR
    new = {h.task_partition: h for h in rerun}
    reproduced = all(p in new and new[p].checksum == h.checksum
                     and new[p].record_count == h.record_count for p, h in visible.items())
    if not reproduced:
        assert plan.losses and not plan.to_commit and not plan.duplicates
        assert {loss.task_partition for loss in plan.losses} <= set(visible)
        return
    assert not plan.losses
    assert set(plan.to_commit) | set(plan.duplicates) == set(rerun)
    assert not set(plan.to_commit) & set(plan.duplicates)
    # what becomes visible is exactly the re-run's output, each partition once
    result = {**{p: (h.checksum, h.record_count) for p, h in visible.items()},
              **{h.task_partition: (h.checksum, h.record_count) for h in plan.to_commit}}
    assert result == {p: (h.checksum, h.record_count) for p, h in new.items()}
    assert not {h.task_partition for h in plan.to_commit} & set(visible)


@given(batch_handles(), batch_handles())
def test_plan_commit_and_abort(intent: tuple[Handle, ...], rerun: tuple[Handle, ...]) -> None:
    committed = BatchState("7", BatchStatus.COMMITTED, 0, 1, 0, intent,
                           committed={h.task_partition: h for h in intent})
    plan = plan_commit(committed, rerun + intent)
    assert plan.action is CommitAction.ALREADY_COMMITTED and not plan.to_commit
    # the same transaction (id, producer id, epoch) is a retry of the intent's own message
    ident = {(h.transactional_id, h.producer_id, h.epoch) for h in intent}
    assert set(plan.retried) == {h for h in rerun + intent
                                 if (h.transactional_id, h.producer_id, h.epoch) in ident}
    assert set(plan.duplicates) == {h for h in rerun
                                    if (h.transactional_id, h.producer_id, h.epoch) not in ident}
    assert plan_commit(BatchState("7", BatchStatus.PREPARED, 0, 0, 0, intent),
                       rerun).action is CommitAction.RECOVER_FIRST
    for status in (BatchStatus.NONE, BatchStatus.ABORTED):
        fresh = plan_commit(BatchState("7", status), rerun)
        assert fresh.action is CommitAction.FRESH and fresh.to_commit == rerun
    roll, fence = plan_abort(BatchState("7", BatchStatus.PREPARED, 0, 0, 0, intent), rerun + intent)
    assert roll and set(fence) == {h for h in rerun  # never fence what the intent names
                                   if (h.transactional_id, h.producer_id, h.epoch) not in ident}


# ---- the fold of the log ------------------------------------------------------------------------

# The reference table: (state, record kind) -> next state; a missing pair is a contradiction.
# "aborted*" ends the open intent; "aborted" is a fence note without intent.
TABLE: dict[tuple[BatchStatus, str], BatchStatus] = {}
for s in (BatchStatus.NONE, BatchStatus.ABORTED, BatchStatus.PARTIAL):
    TABLE[(s, "prepared")] = BatchStatus.PREPARED
    TABLE[(s, "committed-empty")] = BatchStatus.COMMITTED
for s in BatchStatus:
    TABLE[(s, "duplicates")] = s
    TABLE[(s, "aborted")] = BatchStatus.ABORTED if s is BatchStatus.NONE else s
TABLE[(BatchStatus.PREPARED, "committed")] = BatchStatus.COMMITTED
TABLE[(BatchStatus.PREPARED, "partial")] = BatchStatus.PARTIAL
for s in (BatchStatus.PREPARED, BatchStatus.PARTIAL):
    TABLE[(s, "resolved-committed")] = BatchStatus.COMMITTED
    TABLE[(s, "resolved-aborted")] = BatchStatus.ABORTED
KINDS = ["prepared", "committed", "committed-empty", "partial", "aborted", "aborted*",
         "duplicates", "resolved-committed", "resolved-aborted", "orphans"]


def _record(kind: str, batch: str, intent: int, hs: tuple[Handle, ...]) -> LogRecord:
    ids = tuple(h.transactional_id for h in hs)
    makers: dict[str, Callable[[], LogRecord]] = {
        "prepared": lambda: Prepared(batch, hs),
        "committed": lambda: Committed(batch, intent, ()),
        "committed-empty": lambda: Committed(batch, None, ()),
        "partial": lambda: Partial(batch, intent, ids[:1], ids[1:]),
        "aborted": lambda: Aborted(batch, hs, "r", None),
        "aborted*": lambda: Aborted(batch, hs, "r", intent),
        "duplicates": lambda: Duplicates(batch, ids),
        "resolved-committed": lambda: Resolved(batch, "committed", "n"),
        "resolved-aborted": lambda: Resolved(batch, "aborted", "n"),
        "orphans": lambda: Orphans(ids),
    }
    return makers[kind]()


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(["1", "2"]), st.booleans()),
                max_size=12), batch_handles())
def test_fold_follows_the_table(steps: list[tuple[str, str, bool]], hs: tuple[Handle, ...]) -> None:
    model: dict[str, BatchStatus] = {}
    before: dict[str, BatchStatus] = {}
    intents: dict[str, int] = {}
    records: list[tuple[int, LogRecord]] = []
    for seq, (kind, batch, right_intent) in enumerate(steps):
        open_intent = intents.get(batch, -5)
        rec = _record(kind, batch, open_intent if right_intent else open_intent + 1, hs)
        records.append((seq, rec))
        cur = model.get(batch, BatchStatus.NONE)
        if kind == "orphans":
            continue
        if kind in ("committed", "partial", "aborted*"):
            ok = cur is BatchStatus.PREPARED and right_intent
            nxt = {"committed": BatchStatus.COMMITTED, "partial": BatchStatus.PARTIAL}.get(
                kind, BatchStatus.ABORTED if before.get(batch, BatchStatus.NONE) is
                BatchStatus.NONE else before.get(batch, BatchStatus.NONE))
        elif (cur, kind) == (BatchStatus.ABORTED, "resolved-aborted"):
            # An operator gives up the decided records of a batch aborted after its intent; an
            # aborted batch with nothing decided lost is not stuck.
            ok = fold(records[:-1]).batch(batch).awaits_repair
            nxt = BatchStatus.ABORTED
        else:
            ok = (cur, kind) in TABLE
            nxt = TABLE.get((cur, kind), cur)
        if not ok:
            with pytest.raises(InconsistentLog):
                fold(records)
            with pytest.raises(InconsistentLog):  # as a driver folds its own append
                fold(records[-1:], after=fold(records[:-1]))
            return
        if kind == "prepared":
            intents[batch], before[batch] = seq, cur
        model[batch] = nxt
        state = fold(records)
        assert fold(records[-1:], after=fold(records[:-1])) == state
        assert {b: s.status for b, s in state.batches.items() if b in model} == model
        assert state.last_seq == seq
        assert {b.batch for b in state.pending} == {
            b for b, s in model.items() if s is BatchStatus.PREPARED}


def test_partial_then_repair_accumulates_visible_partitions() -> None:
    a, b, c = (Handle(f"q-{p}-0", 1, 0, (), 1, f"s{p}", 0, 1000, p, 0, 0) for p in range(3))
    state = fold([(0, Prepared("5", (a, b, c))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0", "q-2-0"))),
                  (2, Prepared("5", (b,))), (3, Partial("5", 2, ("q-1-0",), ()))])
    assert state.batch("5").status is BatchStatus.PARTIAL
    assert set(state.batch("5").committed) == {0, 1}
    state = fold([(0, Prepared("5", (a, b))), (1, Partial("5", 0, ("q-0-0",), ("q-1-0",))),
                  (2, Prepared("5", (b,))), (3, Aborted("5", (b,), "timeout", 2))])
    assert state.batch("5").status is BatchStatus.PARTIAL  # the repair committed nothing


# ---- records round-trip through msgpack ---------------------------------------------------------


@given(st.sampled_from(KINDS), st.text(min_size=1, max_size=5), st.integers(0, 99),
       batch_handles())
def test_records_roundtrip(kind: str, batch: str, intent: int, hs: tuple[Handle, ...]) -> None:
    rec = _record(kind, batch, intent, hs)
    body = msgpack.unpackb(msgpack.packb(to_body(rec)))
    assert from_body(body) == rec
    assert from_body(to_body(RollForward(("a",)))) == RollForward(("a",))
    held = Stranded(((batch, "q-0-1", "release failed at add_partitions: X"),), ("q-1-0",))
    assert from_body(msgpack.unpackb(msgpack.packb(to_body(held)))) == held


def test_records_refuse_unknown() -> None:
    from twopc.protocol.log_records import RecordFormatError

    for body in ({"kind": "prepared", "v": 2, "batch": "1", "handles": []},
                 {"kind": "nope", "v": 1}, {"kind": "committed", "v": 1},
                 {"kind": "resolved", "v": 1, "batch": "1", "decision": "maybe", "note": ""}):
        with pytest.raises(RecordFormatError):
            from_body(body)


# ---- the pool and the purge ---------------------------------------------------------------------


def test_pool_membership() -> None:
    assert in_pool("q1", "q1-0-3") and not in_pool("q1", "q10-0-3")
    assert not in_pool("q1", "q1-0") and not in_pool("q.1", "qx1-0-0")
    assert unnamed_open("q", ["q-0-0", "q-1-0", "q1-0-0", "other"], ["q-1-0"]) == ("q-0-0",)


@given(st.lists(st.tuples(st.sampled_from(["prepared", "committed", "duplicates"]),
                          st.sampled_from(["1", "2", "3", "4"])), max_size=20),
       st.integers(0, 3))
def test_purge_keeps_unfinished_and_recent(steps: list[tuple[str, str]], retain: int) -> None:
    records: list[tuple[int, LogRecord]] = []
    intents: dict[str, int] = {}
    for kind, batch in steps:
        seq = len(records)
        st_ = fold(records).batch(batch).status
        if kind == "prepared" and st_ in (BatchStatus.NONE, BatchStatus.ABORTED):
            records.append((seq, Prepared(batch, ())))
            intents[batch] = seq
        elif kind == "committed" and st_ is BatchStatus.PREPARED:
            records.append((seq, Committed(batch, intents[batch], ())))
        elif kind == "duplicates":
            records.append((seq, Duplicates(batch, ())))
    state = fold(records)
    below = purge_below(state, retain)
    if below is None:
        return
    assert 0 < below <= state.last_seq  # the latest record always stays
    for b in state.batches.values():
        if not b.finished:
            assert b.first_seq >= below
    finished = sorted((b for b in state.batches.values() if b.finished), key=lambda b: b.last_seq)
    for b in finished[len(finished) - min(retain, len(finished)):]:
        assert b.first_seq >= below
    # what is kept folds on its own, to the same states for the kept batches
    kept = fold([(s, r) for s, r in records if s >= below], start_seq=below)
    for name, b in kept.batches.items():
        if state.batches[name].first_seq >= below:
            assert b.status is state.batches[name].status


def test_exhaustive_small_batch_outcomes() -> None:
    for n in range(1, 4):
        for combo in itertools.product([Fate.COMMITTED, Fate.ABORTED, Fate.UNKNOWN], repeat=n):
            out = batch_outcome({str(i): Verdict(f) for i, f in enumerate(combo)})
            assert (out is BatchOutcome.UNDECIDED) == (Fate.UNKNOWN in combo)


# ---- batch jobs: the job-id index and the purge -------------------------------------------------


def test_job_state_table() -> None:
    """The index holds only committed jobs: it lifts a job whose records were purged (the fold then
    shows nothing, or only fences) and never overrides what the log itself still shows."""
    lifted = {BatchStatus.NONE: BatchStatus.COMMITTED, BatchStatus.ABORTED: BatchStatus.COMMITTED}
    for status in BatchStatus:
        state = BatchState("j", status)
        assert job_state(state, indexed=False) == state
        assert job_state(state, indexed=True).status is lifted.get(status, status)


JOB_ACTIONS = ["commit", "commit_unindexed", "commit_empty", "crash_after_intent", "settle",
               "abort_intent", "fence", "duplicates", "purge"]


@settings(max_examples=400)
@given(st.lists(st.tuples(st.sampled_from(JOB_ACTIONS), st.sampled_from(["J1", "J2", "J3", "J4"]),
                          st.integers(0, 3)), max_size=40))
def test_a_committed_job_is_never_lost_by_the_purge(steps: list[tuple[str, str, int]]) -> None:
    """Jobs committed along every path (indexed at once, or not: a crash between the Committed record
    and the index, a roll-forward by recovery or abort()), purges at random: a job once committed
    stays committed for job_state (the log's own records, or the index), and the index never
    names a job that did not commit."""
    records: list[tuple[int, LogRecord]] = []
    mark = 0
    index: set[str] = set()
    committed: set[str] = set()

    def state_of(name: str) -> BatchState:
        return fold([(s, r) for s, r in records if s >= mark], start_seq=mark).batch(name)

    def append(record: LogRecord) -> int:
        records.append((len(records), record))
        return len(records) - 1

    for action, job, retain in steps:
        cur = job_state(state_of(job), job in index)
        if action == "purge":
            log = fold([(s, r) for s, r in records if s >= mark], start_seq=mark)
            plan = plan_purge(log, retain, mark, jobs=True)
            if plan is not None:
                assert mark < plan.below <= log.last_seq
                assert plan.below == purge_below(log, retain)
                index |= {b.batch for b in plan.to_index}  # before the mark moves
                mark = plan.below
        elif cur.status in (BatchStatus.NONE, BatchStatus.ABORTED):  # a run that may commit
            if action in ("commit", "commit_unindexed", "crash_after_intent"):
                intent = append(Prepared(job, ()))
                if action != "crash_after_intent":
                    append(Committed(job, intent, ()))
                    committed.add(job)
                if action == "commit":
                    index.add(job)
            elif action == "commit_empty":
                append(Committed(job, None, ()))
                committed.add(job)
            elif action == "fence":
                append(Aborted(job, (), "Spark aborted the batch", None))
        elif cur.status is BatchStatus.PREPARED:
            if action == "settle":  # rolled forward by recovery, abort() or a retried commit
                append(Committed(job, cur.intent_seq, ()))
                committed.add(job)
            elif action == "abort_intent":
                append(Aborted(job, (), "aborted before its commit", cur.intent_seq))
        elif cur.status is BatchStatus.COMMITTED and action == "duplicates":
            append(Duplicates(job, ()))
        for name in committed:
            assert job_state(state_of(name), name in index).status is BatchStatus.COMMITTED, name
        assert index <= committed


def test_a_query_log_indexes_nothing() -> None:
    records: list[tuple[int, LogRecord]] = [(0, Prepared("1", ())), (1, Committed("1", 0, ())),
                                            (2, Prepared("2", ())), (3, Committed("2", 2, ()))]
    query = plan_purge(fold(records), 1, 0, jobs=False)
    job = plan_purge(fold(records), 1, 0, jobs=True)
    assert query is not None and job is not None and query.below == job.below == 2
    assert query.to_index == () and [b.batch for b in job.to_index] == ["1"]
    assert plan_purge(fold(records), 1, 2, jobs=True) is None  # the mark is already there


# ---- ids in use: pending intents and stranded holds; a task's slot ------------------------------


def _committed_batch(batch: str, seq: int, *hs: Handle) -> list[tuple[int, LogRecord]]:
    return [(seq, Prepared(batch, hs)), (seq + 1, Committed(batch, seq, ()))]


def test_stranded_holds_follow_released_and_stranded_records() -> None:
    a = Handle("q-0-0", 1, 0, (), 1, "s", 0, 1000, 0, 0, 0)
    b = Handle("q-1-0", 2, 0, (), 1, "s", 0, 1000, 1, 0, 0)
    records = [*_committed_batch("1", 0, a, b), (2, Released(("1",), ("q-0-0",), ()))]
    state = fold(records)
    assert set(state.stranded) == {"q-0-0"} and state.stranded["q-0-0"].batches == ("1",)
    assert set(state.in_use()) == {"q-0-0"}  # a release recorded, not confirmed: held
    records.append((3, Stranded((("1", "q-1-0", "DescribeProducers answered X"),), ())))
    assert set(fold(records).in_use()) == {"q-0-0", "q-1-0"}
    records.append((4, Stranded((), ("q-0-0",))))
    state = fold(records)
    assert set(state.stranded) == {"q-1-0"} and "DescribeProducers" in state.in_use()["q-1-0"]
    # A pending intent's ids are in use too; the purge keeps the held batch and its record.
    records += [(5, Prepared("2", (Handle("q-2-0", 3, 0, (), 1, "s", 0, 1000, 2, 0, 0),)))]
    state = fold(records)
    assert set(state.in_use()) == {"q-1-0", "q-2-0"}
    assert "pending intent of batch 2" in state.in_use()["q-2-0"]
    assert purge_below(state, 0) is None  # batch 1 (seq 0) holds q-1-0: nothing below it goes
    records.append((6, Stranded((), ("q-1-0",))))
    assert purge_below(fold(records), 0) == 5  # cleared: only the pending intent stays


@given(prefix=st.sampled_from(["q", "job"]), p=st.integers(0, 3), attempt=st.integers(0, 40),
       slots=st.integers(2, 8), busy=st.sets(st.integers(0, 9)))
def test_choose_slot(prefix: str, p: int, attempt: int, slots: int, busy: set[int]) -> None:
    in_use = {transactional_id(prefix, p, s) for s in busy} | {transactional_id(prefix, p + 1, 0)}
    slot = choose_slot(prefix, p, attempt, slots, in_use)
    free = [s for s in range(slots) if s not in busy]
    if not free:
        assert slot is None
        return
    assert slot is not None and 0 <= slot < slots and slot not in busy  # never an id in use
    assert slot == choose_slot(prefix, p, attempt, slots, in_use)  # deterministic
    # Attempts that read the same log get distinct slots, as many as there are free ones.
    window = [choose_slot(prefix, p, a, slots, in_use) for a in range(attempt,
                                                                       attempt + len(free))]
    assert sorted(s for s in window if s is not None) == free
    if not busy:
        assert slot == attempt % slots  # nothing in use: the plain pool, as before


# ---- one batch job of a family at a time (issue 30, item 4) ------------------------------------


def test_a_job_family_lease_is_taken_renewed_and_ended() -> None:
    from twopc.protocol.log_records import Lease
    from twopc.protocol.plans import blocking_lease

    taken = Lease("J1", "r1", 5000, 1000, "host a pid 1")
    msgpack_round = from_body(msgpack.unpackb(msgpack.packb(to_body(taken))))
    assert msgpack_round == taken
    records: list[tuple[int, LogRecord]] = [(0, taken)]
    lease = fold(records).lease
    assert lease is not None and (lease.job, lease.run, lease.until_ms, lease.seq) == (
        "J1", "r1", 5000, 0)
    # Another job is refused while it is live, not after; a run of the same job takes it over.
    assert blocking_lease(lease, "J2", 4999) == lease
    assert blocking_lease(lease, "J2", 5000) is None
    assert blocking_lease(lease, "J1", 1001) is None
    assert blocking_lease(None, "J2", 0) is None
    records.append((1, Lease("J1", "r1", 9000, 1000, "host a pid 1")))  # renewed
    assert fold(records).lease.until_ms == 9000  # type: ignore[union-attr]
    # Only the run holding it ends it.
    records.append((2, Lease("J1", "r0", 0, 0, "old run")))
    assert fold(records).lease is not None
    assert fold([*records, (3, Lease("J1", "r1", 0, 1000, "x"))]).lease is None
    # The job's committed record does not end it: its run still fences the orphans it names.
    assert fold([*records, (3, Committed("J1", None, ()))]).lease is not None
    assert fold([*records, (3, Committed("K", None, ()))]).lease is not None
    # The purge keeps the record of a lease nothing ended (a later run's record ends it).
    records += [(3, Committed("K", None, ())), (4, Committed("L", None, ()))]
    assert purge_below(fold(records), 0) == 1  # its last record (the renewal) stays
    assert purge_below(fold([*records, (5, Lease("J1", "r1", 0, 1000, "x"))]), 0) == 5


def test_a_batch_without_records_names_the_id_of_its_offsets_transaction() -> None:
    from twopc.driver.call import named_ids
    from twopc.protocol.offsets import SourceOffsets, alone_id

    offsets = SourceOffsets("g", (("t", 0, 5),))
    assert alone_id("q") == "q-offsets" and not in_pool("q", alone_id("q"))  # no task takes it
    carried = offsets.with_carrier("q-0-1")
    state = fold([(0, Prepared("7", (), carried))])
    assert state.pending_ids() == {"q-0-1"}
    assert "pending intent of batch 7" in state.in_use()["q-0-1"]
    assert named_ids(Prepared("7", (), carried)) == ("q-0-1",)
    # An intent written before these transactions names no id: nothing is in use.
    assert fold([(0, Prepared("7", (), offsets))]).pending_ids() == frozenset()
    assert named_ids(Prepared("7", (), offsets)) == ()
