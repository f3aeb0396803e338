"""The log's records folded into per-batch states: the protocol's state table. Pure: no I/O.

    the log's records ──fold──> LogState (per batch: NONE, ABORTED, PREPARED, PARTIAL, COMMITTED;
                                 and the ids held by stranded commits)

Each record moves its batch by the table `_NEXT` (status, step) -> next status; a pair not in the
table contradicts the records before it and stops the reader (InconsistentLog), never skipped. The
rest of the protocol's judgement is beside this module: plans.py (what to do with a batch's
handles, the pool, the purge), verdicts.py (what the broker's answers prove), holds.py (stranded
commits), pool.py (which id a task takes); tested exhaustively in tests/protocol/test_decisions.py.
docs/design.md sections 4 to 6.

Verdicts belong to a handle (transactional id, producer id, epoch: `txn_key`), never to a
transactional id alone: two recorded intents can name one id with different producer epochs (a
later task re-initialised it), and each keeps its own outcome. An id is in use, and no task
takes it (docs/design.md section 5: reused only once its transaction is resolved and recorded), while
a pending intent names it or a stranded commit holds it (`LogState.in_use`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from twopc.errors import InconsistentLog
from twopc.protocol.enums import TextEnum
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import (
    RESOLVE_COMMITTED,
    Aborted,
    Committed,
    Copying,
    Duplicates,
    Lease,
    LogRecord,
    OffsetsCommitted,
    Orphans,
    Partial,
    Prepared,
    Released,
    Resolved,
    RollForward,
    Stranded,
)
from twopc.protocol.offsets import SourceOffsets, own_transaction

# ---- the log, folded into per-batch states ----------------------------------------------------


class BatchStatus(TextEnum):
    NONE = "none"  # nothing recorded (or only fences): write and commit normally
    ABORTED = "aborted"  # an earlier attempt committed nothing: write and commit again
    PREPARED = "prepared"  # an intent without outcome: the decision is commit, roll it forward
    PARTIAL = "partial"  # part of it is visible: only a re-run with the same data can finish it
    COMMITTED = "committed"  # done: a re-run's transactions are duplicates


@dataclass(frozen=True)
class BatchState:
    batch: str
    status: BatchStatus = BatchStatus.NONE
    first_seq: int = -1
    last_seq: int = -1
    intent_seq: int | None = None  # the open (PREPARED) or last intent
    intent: tuple[Handle, ...] = ()
    before_intent: BatchStatus = BatchStatus.NONE  # where an intent that commits nothing leads back
    committed: Mapping[int, Handle] = field(default_factory=dict)  # Spark partition -> visible handle
    offsets: SourceOffsets | None = None  # the last intent's source offsets (and their carrier)
    # Spark partition -> the handle of a decided intent that the broker aborted, for the partitions
    # not visible: its records stay in the log until retention, and copy-forward can commit them
    # again (protocol/copies.py). Empty once the batch commits or an operator resolves it; an
    # intent recorded while nothing was visible replaces it when it is lost in turn (`_lost`).
    lost: Mapping[int, Handle] = field(default_factory=dict)
    # The consumer group took these offsets (or a later batch's): an `offsets_committed` record.
    offsets_moved: bool = False

    @property
    def finished(self) -> bool:
        return self.status not in (BatchStatus.PREPARED, BatchStatus.PARTIAL)

    @property
    def awaits_repair(self) -> bool:
        """Aborted after its intent, the decided records lost and not given up: a re-run (or
        `twopc recover --repair copy`) copies them forward from the Kafka log, and only the log
        remembers what was decided (the purge keeps it: plans.py `purge_below`). An operator's
        `--resolve B --decision aborted` gives them up."""
        return self.status is BatchStatus.ABORTED and bool(self.lost)

    @property
    def offsets_pending(self) -> bool:
        """Committed, with source offsets that move after the batch is proven visible
        (protocol/offsets.py) and have not moved yet."""
        return (self.status is BatchStatus.COMMITTED and self.offsets is not None
                and self.offsets.deferred and not self.offsets_moved)


@dataclass(frozen=True)
class StrandedHold:
    """An id whose committed transaction may still hold partitions open: a release was recorded
    and not yet confirmed, or a check could not release it (stranded.py). No task takes the id
    until a later check clears it: a transaction of the same producer id on such a partition
    would end the committed records with its own ending, an abort included."""

    transactional_id: str
    batches: tuple[str, ...]  # whose committed handles hold the id
    seq: int  # the first record holding it (purge keeps it, and those batches, in the log)
    reason: str
    # The partitions a recorded release of the id added to its transaction: a transaction of the
    # id open on exactly those is that release, cut short before its EndTxn (verdicts.judge).
    released: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True)
class JobLease:
    """The run of a batch job that holds its family's log (a `lease` record, docs/design.md
    section 5), until `until_ms` on its driver's clock. Ended by a `lease` record of the same run
    with `until_ms` 0 (the run's release, after everything its commit sends), or by its expiry. Not
    by the job's `committed` record: the run still fences the orphans that record names, and a
    next job let in before then could have its own transaction on such an id fenced."""

    job: str
    run: str
    until_ms: int
    since_ms: int
    holder: str
    seq: int  # its record (the purge keeps it while it holds)

    def live(self, now_ms: int) -> bool:
        return now_ms < self.until_ms


@dataclass(frozen=True)
class LogState:
    batches: Mapping[str, BatchState]
    last_seq: int  # -1 for an empty log
    stranded: Mapping[str, StrandedHold] = field(default_factory=dict)  # by transactional id
    lease: JobLease | None = None  # the batch job run holding the family's log (jobs only)

    def batch(self, batch: str) -> BatchState:
        return self.batches.get(batch) or BatchState(batch)

    def in_use(self) -> dict[str, str]:
        """The ids no task may take now, each with why: named by a pending intent (its
        transaction is not resolved), or held by a stranded commit."""
        out = {t: f"a committed transaction of batch {', '.join(h.batches)} still holds "
                  f"partitions open ({h.reason})" for t, h in self.stranded.items()}
        for b in self.pending:
            for tid in intent_ids(b):
                out[tid] = f"named by the pending intent of batch {b.batch}"
        return out

    @property
    def pending(self) -> tuple[BatchState, ...]:
        """Batches whose intent has no recorded outcome, oldest first."""
        return tuple(sorted((b for b in self.batches.values() if b.status is BatchStatus.PREPARED),
                            key=lambda b: b.intent_seq or 0))

    def pending_ids(self) -> frozenset[str]:
        return frozenset(tid for b in self.pending for tid in intent_ids(b))


def intent_ids(b: BatchState) -> tuple[str, ...]:
    """The ids a batch's intent names: its handles', and the id of its source offsets' own
    transaction (their carrier) for a batch without records or with deferred offsets."""
    return (*(h.transactional_id for h in b.intent), *own_transaction(b.offsets, bool(b.intent)))


def fold(records: Iterable[tuple[int, LogRecord]], url: str = "", start_seq: int = 0,
         after: LogState | None = None) -> LogState:
    """The state of every batch after ``records`` (seq, record), read from ``start_seq`` on;
    with ``after``, the records follow those that folded to ``after`` (a driver's own appends).

    A record that contradicts the ones before it raises InconsistentLog (never skipped).
    """
    batches: dict[str, BatchState] = dict(after.batches) if after is not None else {}
    holds: dict[str, StrandedHold] = dict(after.stranded) if after is not None else {}
    lease = after.lease if after is not None else None
    last = after.last_seq if after is not None else start_seq - 1
    for seq, rec in records:
        last = seq
        if isinstance(rec, Lease):
            lease = _next_lease(lease, rec, seq)
            continue
        if isinstance(rec, Released):
            for tid in rec.ids:
                parts = frozenset((topic, p) for t, topic, p in rec.partitions if t == tid)
                _hold(holds, tid, rec.batches, seq, "its release was recorded, not confirmed",
                      parts)
            continue
        if isinstance(rec, Stranded):
            for tid in rec.cleared:
                holds.pop(tid, None)
            for batch, tid, why in rec.held:
                _hold(holds, tid, (batch,), seq, why)
            continue
        if isinstance(rec, Orphans | RollForward | Copying):
            continue
        if isinstance(rec, OffsetsCommitted):
            _offsets_moved(batches, rec, seq)
            continue
        cur = batches.get(rec.batch) or BatchState(rec.batch, first_seq=seq)
        batches[rec.batch] = replace(_step(cur, seq, rec, url, start_seq), last_seq=seq)
    return LogState(batches, last, holds, lease)


def _offsets_moved(batches: dict[str, BatchState], rec: OffsetsCommitted, seq: int) -> None:
    """The group took `rec.batch`'s end offsets: those of every batch intended up to it are moved
    (end offsets cover every earlier batch's), never to be committed again."""
    for name, b in batches.items():
        if b.intent_seq is not None and b.intent_seq <= rec.intent_seq and b.offsets is not None:
            batches[name] = replace(b, offsets_moved=True)
    if rec.batch in batches:
        batches[rec.batch] = replace(batches[rec.batch], last_seq=seq)


def _next_lease(cur: JobLease | None, rec: Lease, seq: int) -> JobLease | None:
    """A `lease` record taken, renewed or ended (`until_ms` 0: only by the run holding it)."""
    if rec.until_ms <= 0:
        return None if cur is None or cur.run == rec.run else cur
    return JobLease(rec.job, rec.run, rec.until_ms, rec.since_ms, rec.holder, seq)


def _hold(holds: dict[str, StrandedHold], tid: str, batches: Sequence[str], seq: int,
          reason: str, released: frozenset[tuple[str, int]] = frozenset()) -> None:
    old = holds.get(tid)
    if old is not None:
        batches = (*old.batches, *batches)
        seq = min(seq, old.seq)
        released = old.released | released
    holds[tid] = StrandedHold(tid, tuple(sorted(set(batches))), seq, reason, released)


class Step(enum.Enum):
    """What a record does to its batch: its kind, and for an outcome whether it ends the batch's
    open intent or one below the purge's mark (`_step_of`). The moves are the table `_NEXT`."""

    INTENT = "prepared"
    COMMIT = "committed"  # ends the open intent: its handles are visible
    COMMIT_EMPTY = "committed, no intent"  # a batch that wrote no rows
    PARTIAL = "partial"  # ends the open intent: the handles it names are visible
    ABORT = "aborted"  # ends the open intent: nothing of it is visible
    FENCE = "aborted, no intent"  # a note of what was fenced; ends nothing
    COMMIT_PURGED = "committed, intent purged"  # stands as recorded
    PARTIAL_PURGED = "partial, intent purged"  # stands as recorded
    DUPLICATES = "duplicates"
    RESOLVE_COMMITTED = "resolved committed"
    RESOLVE_ABORTED = "resolved aborted"
    RESOLVE_PURGED_COMMITTED = "resolved committed, stuck records purged"  # stands as recorded
    RESOLVE_PURGED_ABORTED = "resolved aborted, stuck records purged"  # stands as recorded


_BACK = "back"  # to the status before the intent (ABORTED if that was NONE)
_N, _A, _P, _PA, _C = (BatchStatus.NONE, BatchStatus.ABORTED, BatchStatus.PREPARED,
                       BatchStatus.PARTIAL, BatchStatus.COMMITTED)
# Only a finished batch (not PREPARED) can have had its intent purged; a batch is open for an
# intent, and for an empty commit, unless an intent is open or it committed.
_REOPENED: dict[Step, BatchStatus | str] = {
    Step.INTENT: _P, Step.COMMIT_EMPTY: _C, Step.COMMIT_PURGED: _C, Step.PARTIAL_PURGED: _PA}

# (batch status, step) -> the next status. A pair not in the table contradicts the records before
# it: InconsistentLog, never skipped.
_NEXT: dict[BatchStatus, dict[Step, BatchStatus | str]] = {
    _N: {**_REOPENED, Step.FENCE: _A, Step.DUPLICATES: _N, Step.RESOLVE_PURGED_COMMITTED: _C,
         Step.RESOLVE_PURGED_ABORTED: _A},
    _A: {**_REOPENED, Step.FENCE: _A, Step.DUPLICATES: _A, Step.RESOLVE_ABORTED: _A,
         Step.RESOLVE_PURGED_COMMITTED: _C, Step.RESOLVE_PURGED_ABORTED: _A},
    _P: {Step.COMMIT: _C, Step.PARTIAL: _PA, Step.ABORT: _BACK, Step.FENCE: _P,
         Step.DUPLICATES: _P, Step.RESOLVE_COMMITTED: _C, Step.RESOLVE_ABORTED: _A},
    _PA: {**_REOPENED, Step.FENCE: _PA, Step.DUPLICATES: _PA, Step.RESOLVE_COMMITTED: _C,
          Step.RESOLVE_ABORTED: _A},
    _C: {Step.COMMIT_PURGED: _C, Step.PARTIAL_PURGED: _PA, Step.FENCE: _C, Step.DUPLICATES: _C},
}
# Why a step missing from the table contradicts the log (the other steps are in every row
# `_step_of` can return them for).
_REFUSED = {
    Step.INTENT: "a second intent while one is open or the batch is committed",
    Step.COMMIT_EMPTY: "an empty batch committed twice or over an open intent",
    Step.RESOLVE_COMMITTED: "an operator resolution for a batch that is not stuck",
    Step.RESOLVE_ABORTED: "an operator resolution for a batch that is not stuck",
}


def _step(cur: BatchState, seq: int, rec: LogRecord, url: str, start: int) -> BatchState:
    nxt = _next(cur, seq, rec, url, start)
    # A committed batch is done: nothing of it is left to copy forward.
    return replace(nxt, lost={}) if nxt.status is _C and nxt.lost else nxt


def _next(cur: BatchState, seq: int, rec: LogRecord, url: str, start: int) -> BatchState:
    def bad(why: str) -> InconsistentLog:
        return InconsistentLog(url, seq, f"batch {cur.batch}: {why} (state {cur.status.value})")

    step = _step_of(cur, rec, start, bad)
    nxt = _NEXT[cur.status].get(step)
    if nxt is None:
        raise bad(_REFUSED.get(step, f"{step.value} here"))
    if nxt == _BACK:
        nxt = _A if cur.before_intent is _N else cur.before_intent
    assert isinstance(nxt, BatchStatus)
    if step is Step.INTENT:
        assert isinstance(rec, Prepared)
        # A repair's intent carries no source offsets when the visible part's carrier already
        # committed them: the batch keeps those.
        kept = cur.offsets if cur.status is _PA else None
        return replace(cur, status=nxt, intent_seq=seq, intent=rec.handles,
                       before_intent=cur.status, offsets=rec.offsets or kept,
                       offsets_moved=cur.offsets_moved and rec.offsets is None)
    if step is Step.COMMIT:
        return replace(cur, status=nxt, committed={**cur.committed, **by_partition(cur.intent)})
    if step is Step.PARTIAL:
        assert isinstance(rec, Partial)
        won = set(rec.committed)
        committed = {**cur.committed,
                     **by_partition(h for h in cur.intent if h.transactional_id in won)}
        return replace(cur, status=nxt, committed=committed, lost=_lost(
            cur, (h for h in cur.intent if h.transactional_id not in won), committed))
    if step is Step.ABORT:
        return replace(cur, status=nxt, lost=_lost(cur, cur.intent, cur.committed))
    if step in (Step.RESOLVE_ABORTED, Step.RESOLVE_COMMITTED, Step.RESOLVE_PURGED_ABORTED,
                Step.RESOLVE_PURGED_COMMITTED):
        visible: Mapping[int, Handle] = (
            cur.committed if step is Step.RESOLVE_COMMITTED else {})
        return replace(cur, status=nxt, committed=visible, lost={})
    return cur if nxt is cur.status else replace(cur, status=nxt)


def _lost(cur: BatchState, aborted: Iterable[Handle],
          committed: Mapping[int, Handle]) -> dict[int, Handle]:
    """The decided handles the broker aborted, by Spark partition, for partitions not visible.

    An intent recorded while nothing of the batch was visible (a fresh commit, or the copy of a
    wholly aborted one) names all of the batch: what an earlier attempt left lost is then
    forgotten, not kept beside it. That attempt may hold the same rows under another partitioning
    (the partition count changed between the runs) or other rows (a source that cannot replay):
    copied beside the later attempt's, rows would be visible twice. A repair or copy recorded
    while the batch was partly visible keeps its partitioning and names only the rest of it:
    its handles replace the earlier ones partition by partition."""
    earlier = cur.lost if cur.before_intent is BatchStatus.PARTIAL else {}
    lost = {**earlier, **by_partition(aborted)}
    return {p: h for p, h in lost.items() if p not in committed}


def _step_of(cur: BatchState, rec: LogRecord, start: int,
             bad: Callable[[str], InconsistentLog]) -> Step:
    """Which step `rec` is for its batch; InconsistentLog if it names an intent other than the open
    one (or, for a batch with none, one the purge did not remove)."""

    def ends_open_intent(intent_seq: int) -> bool:
        if cur.status is _P and cur.intent_seq == intent_seq:
            return True
        # Purge keeps unfinished batches whole but may cut a finished one (the latest record always
        # stays): an outcome whose intent lies below the mark stands as recorded.
        if 0 <= intent_seq < start and cur.intent_seq is None:
            return False
        raise bad(f"names intent {intent_seq}, but the open intent is "
                  f"{cur.intent_seq if cur.status is _P else None}")

    if isinstance(rec, Prepared):
        return Step.INTENT
    if isinstance(rec, Committed):
        if rec.intent_seq is None:
            return Step.COMMIT_EMPTY
        return Step.COMMIT if ends_open_intent(rec.intent_seq) else Step.COMMIT_PURGED
    if isinstance(rec, Partial):
        return Step.PARTIAL if ends_open_intent(rec.intent_seq) else Step.PARTIAL_PURGED
    if isinstance(rec, Aborted):
        ends = rec.intent_seq is not None and ends_open_intent(rec.intent_seq)
        return Step.ABORT if ends else Step.FENCE
    if isinstance(rec, Duplicates):
        return Step.DUPLICATES
    assert isinstance(rec, Resolved)
    step = Step.RESOLVE_COMMITTED if rec.decision == RESOLVE_COMMITTED else Step.RESOLVE_ABORTED
    if cur.status in (_P, _PA) or cur.awaits_repair:
        return step  # stuck as the kept records show it (the table refuses what it may not take)
    if cur.intent_seq is None and start > 0:
        # Not stuck as far as the kept records show, and no intent of the batch above the purge's
        # mark: its stuck records lay below the mark (the purge keeps a stuck batch whole, not one
        # resolved since, whose fences or duplicates after them may be kept). The resolution
        # stands as recorded, as an outcome whose intent was purged does.
        return Step.RESOLVE_PURGED_COMMITTED if step is Step.RESOLVE_COMMITTED \
            else Step.RESOLVE_PURGED_ABORTED
    raise bad("an operator resolution for a batch that is not stuck")


def by_partition(handles: Iterable[Handle]) -> dict[int, Handle]:
    return {h.task_partition: h for h in handles}


TxnKey = tuple[str, int, int]


def txn_key(h: Handle) -> TxnKey:
    """One transaction: its id, producer id and epoch (an id alone names many over time)."""
    return (h.transactional_id, h.producer_id, h.epoch)


def same_txn(a: Handle, b: Handle) -> bool:
    return txn_key(a) == txn_key(b)
