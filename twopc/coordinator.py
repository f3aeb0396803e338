"""The driver side of the two-phase commit (docs/design.md section 2, "Driver"; sections 4 and 5).

A Coordinator keeps no state between calls: PySpark runs each commit() and abort() in a fresh
process, so each call reads the checkpoint log, decides (decisions.py), and appends at exactly the
next number before it sends any EndTxn or fence that touches the ids it names (the log is the
fence between drivers). Crash points (crashpoints.py) sit between the steps.

EndTxn order: the first handle alone, then all but the last in parallel, then the last. The few
extra round trips (milliseconds, against the fsynced intent) buy two things: a crash can fall
after exactly 1 and after exactly n-1 answers (the `after_endtxn_1` and `after_endtxn_n_minus_1`
points), and the path the crash tests prove is the path production runs.
With twopc.commitSourceOffsets the last one also carries the batch's source offsets
(source_offsets.py): the group moves with the batch's last transaction, never before the others.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from checkpoint import KeyExists, Log
from twopc import observe
from twopc.control import (
    ControlClient,
    EndTxnOutcome,
    EndTxnRequest,
    TransactionDescription,
    TransactionListing,
    TxnState,
)
from twopc.crashpoints import crash_point
from twopc.decisions import (
    BatchOutcome,
    BatchState,
    BatchStatus,
    CommitAction,
    Fate,
    LogState,
    TxnKey,
    Verdict,
    fate_of_end_txn,
    job_state,
    plan_abort,
    plan_commit,
    plan_purge,
    txn_key,
    unnamed_open,
)
from twopc.errors import (
    BatchAborted,
    BatchPartlyCommitted,
    CommitUnverified,
    DataLossError,
    FenceFailed,
    GuardFailed,
    NoFreeSlot,
    ResolutionRefused,
    TwopcError,
)
from twopc.guards import check_before_intent, warn_clock_outliers
from twopc.handle import Handle, ResultKind, WriteResult
from twopc.pool import choose_slot
from twopc.records import (
    DECISIONS,
    Aborted,
    Binding,
    Committed,
    Duplicates,
    OwnerKind,
    Prepared,
    Resolved,
)
from twopc.recovery import RecoveryReport, fence_failures, settle
from twopc.session import Session, check_binding
from twopc.source_offsets import (
    SourceOffsets,
    SourceOffsetsRefused,
    attach,
    carrier_of,
    commit_plain,
    needs_offsets,
)
from twopc.stranded import StrandedReport, release_stranded_commits, to_check

# A committed transaction's partition must look stranded this long before it is released: markers
# can lag the coordinator's answer by a few hundred milliseconds.
STRANDED_GRACE_MS = 1000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class InvalidResults(ValueError):
    """The messages handed to commit()/abort() do not belong together (wrong batch, two winners)."""


@dataclass
class CommitReport:
    batch: str
    status: str  # "committed", "already_committed", "repaired", "empty"
    committed: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()  # fenced: open ids of the pool the intent does not name
    recovery: RecoveryReport | None = None
    figures: observe.BatchFigures | None = None  # what was logged (observe.metrics for Spark)


@dataclass
class AbortReport:
    batch: str
    fenced: tuple[str, ...] = ()
    recovery: RecoveryReport | None = None
    notes: list[str] = field(default_factory=list)


class Coordinator:
    def __init__(self, log: Log, control: ControlClient, *, owner_kind: OwnerKind | str,
                 owner_id: str, prefix: str, clock_ms: Callable[[], int] = wall_clock_ms,
                 margin_ms: int = 5000, settle_wait_ms: int = 60000, retain_batches: int = 10,
                 stranded_wait_ms: int = 5000) -> None:
        kinds = [k.value for k in OwnerKind]
        if owner_kind not in kinds:
            raise ValueError(f"owner_kind must be one of {kinds}, got {owner_kind!r}")
        if not owner_id or not prefix:
            raise ValueError("owner_id and prefix must be non-empty")
        self.log = log
        self.control = control
        self.binding = Binding(OwnerKind(owner_kind).value, owner_id, prefix)
        self.prefix = prefix
        self.clock_ms = clock_ms
        self.margin_ms = margin_ms
        self.settle_wait_ms = settle_wait_ms
        self.retain_batches = retain_batches
        self.stranded_wait_ms = stranded_wait_ms

    # ---- public -------------------------------------------------------------------------------

    def bind(self) -> None:
        """Bind the log to this query or job (first use); QueryMismatch if it belongs to another."""
        check_binding(self.log, self.binding, create=True)

    def is_committed(self, batch: str) -> bool:
        """Read-only: has this query/job committed `batch`? (Executors skip writing if so.)"""
        return self._read_for_task(batch)[0]

    def task_slot(self, batch: str, task_partition: int, attempt: int, slots: int) -> int | None:
        """Read-only, for an executor's task: None if `batch` is committed (write nothing), else
        the pool slot of the id to write with, one that no pending intent names and no stranded
        commit holds (pool.choose_slot; docs/design.md section 5). NoFreeSlot if none is free."""
        committed, state = self._read_for_task(batch)
        if committed:
            return None
        in_use = state.in_use() if state is not None else {}
        slot = choose_slot(self.prefix, task_partition, attempt, slots, in_use)
        if slot is None:
            raise NoFreeSlot(task_partition, slots, in_use)
        return slot

    def _read_for_task(self, batch: str) -> tuple[bool, LogState | None]:
        # One read of the log per task: is the batch committed, and which ids are in use.
        if not check_binding(self.log, self.binding, create=False):
            return False, None
        session = Session(self.log)
        return self._batch_state(session, batch).status is BatchStatus.COMMITTED, session.state

    def commit(self, batch: str, results: Sequence[WriteResult | None],
               offsets: SourceOffsets | None = None) -> CommitReport:
        """Commit `batch`; with `offsets`, its source offsets too, inside its transactions
        (source_offsets.py)."""
        began = time.monotonic()
        try:
            report = self._commit(batch, results, offsets)
        except TwopcError as exc:
            self._observe("commit", batch, type(exc).__name__, results, 0, began)
            raise
        report.figures = self._observe("commit", batch, report.status, results,
                                       len(report.committed), began)
        return report

    def _commit(self, batch: str, results: Sequence[WriteResult | None],
                offsets: SourceOffsets | None) -> CommitReport:
        handles, skipped = _handles_of(batch, results, allow_failed=False)
        # Guard 3's DescribeTransactions, sent while the log is read (a read, so asking early
        # changes nothing; its answer serves only a fresh plan on this first read, below).
        described = (self.control.start_describe_transactions(
            [h.transactional_id for h in handles]) if handles else None)
        self.bind()
        session = Session(self.log)
        recovery: RecoveryReport | None = None
        swept: tuple[str, ...] = ()  # losing attempts fenced by the settling of an open intent
        for _ in range(2):  # at most one settling of an open intent, then a plan on firm ground
            state = self._batch_state(session, batch)
            if skipped and state.status is not BatchStatus.COMMITTED:
                reason = (f"Spark partitions {sorted(skipped)} skipped writing because the batch "
                          "looked committed, but the log does not show it committed")
                self._fence_recorded(session, Aborted(batch, tuple(handles), reason, None))
                raise BatchAborted(batch, reason)
            plan = plan_commit(state, handles)
            if plan.action is CommitAction.RECOVER_FIRST:
                recovery = settle(session, self.control, [state], prefix=self.prefix,
                                  wait_ms=self.settle_wait_ms, sweep=False, name_orphans=True)
                recovery.raise_if_undecided()
                if recovery.batches[0].outcome is BatchOutcome.COMMITTED:
                    self._verify_markers(session, batch, only={batch})
                    swept = recovery.batches[0].orphans
                    self._fence_orphans(batch, swept)
                continue
            if plan.action is CommitAction.ALREADY_COMMITTED:
                dups = self._fence_recorded(session, Duplicates(
                    batch, tuple(h.transactional_id for h in plan.duplicates)))
                return CommitReport(batch, "already_committed", duplicates=dups, orphans=swept,
                                    recovery=recovery)
            if plan.losses:
                self._fence_recorded(session, Aborted(
                    batch, tuple(handles), "the re-run differs from the visible data", None))
                raise DataLossError(batch, plan.losses)
            dups = self._fence_recorded(session, Duplicates(
                batch, tuple(h.transactional_id for h in plan.duplicates)))
            if plan.action is CommitAction.REPAIR and not needs_offsets(
                    state.offsets, (h.transactional_id for h in state.committed.values())):
                offsets = None  # the visible part carried them
            early = (described if plan.action is CommitAction.FRESH and recovery is None
                     else None)
            report = self._commit_fresh(session, batch, plan.to_commit, offsets, early)
            report.duplicates = dups
            report.recovery = recovery
            if plan.action is CommitAction.REPAIR:
                report.status = "repaired"
            return report
        raise AssertionError("an open intent survived its own settling")  # settle records outcomes

    def abort(self, batch: str, results: Sequence[WriteResult | None]) -> AbortReport:
        """Spark's abort: roll an open intent forward (it is the commit decision), and fence the
        handles in `results` that no intent names."""
        began = time.monotonic()
        handles, _ = _handles_of(batch, results, allow_failed=True)
        self.bind()
        session = Session(self.log)
        report = AbortReport(batch)
        roll_first, _ = plan_abort(session.state.batch(batch), handles)
        undecided: Exception | None = None
        if roll_first:
            report.recovery = settle(session, self.control, [session.state.batch(batch)],
                                     prefix=self.prefix, wait_ms=self.settle_wait_ms, sweep=False)
            try:
                report.recovery.raise_if_undecided()
            except Exception as exc:  # fence the others first, then report it
                undecided = exc
        state = self._batch_state(session, batch)
        _, others = plan_abort(state, handles)
        ids = tuple(h.transactional_id for h in others)
        try:
            if state.status is BatchStatus.COMMITTED:
                report.fenced = self._fence_recorded(session, Duplicates(batch, ids))
            else:
                report.fenced = self._fence_recorded(
                    session, Aborted(batch, others, "Spark aborted the batch", None))
        except TwopcError as exc:
            self._observe("abort", batch, type(exc).__name__, results, 0, began)
            raise
        outcome = "rolled_forward" if report.recovery is not None else "fenced"
        if undecided is not None:
            outcome = type(undecided).__name__
        self._observe("abort", batch, outcome, results, 0, began)
        if undecided is not None:
            raise undecided
        return report

    def recover(self, on_progress: Callable[[int, int], None] | None = None) -> RecoveryReport:
        """Settle every recorded intent without outcome and fence the pool's unnamed open
        transactions. Run before any new writes; idempotent. UndecidedError if an outcome cannot
        be proven (nothing is guessed); a partly committed batch is left for its re-run.
        `on_progress(settled, total)` follows the transactions being settled."""
        began = time.monotonic()
        self.bind()
        session = Session(self.log)
        pending = session.state.pending
        # Stranded commits first: the sweep's fences must not abort records they hold (commit()).
        early = self._release_stranded(session)
        report = settle(session, self.control, pending, prefix=self.prefix,
                        wait_ms=self.settle_wait_ms, sweep=True, on_progress=on_progress)
        intents = {b.batch: b.intent for b in pending}
        for b in report.batches:
            if b.outcome is BatchOutcome.COMMITTED:
                self._remember_job(b.batch, b.recorded_seq)
            observe.log_batch(observe.figures(
                "recovery", b.batch, b.outcome.value, intents.get(b.batch, ()),
                committed=sum(h.outcome == "committed" for h in b.handles),
                now_ms=self.clock_ms(), latency_ms=(time.monotonic() - began) * 1000))
        settled = {b.batch for b in report.batches if b.outcome is BatchOutcome.COMMITTED}
        # (The held ids were just checked, and retried if they could be released.)
        late = self._release_stranded(session, only=settled, recheck_held=False) if settled \
            else StrandedReport()
        report.stranded = early.merged(late)
        self._purge(session)
        report.raise_if_incomplete()
        return report

    def resolve(self, batch: str, decision: str, note: str) -> None:
        """The operator's explicit decision for a stuck batch, recorded.

        "committed": keep what is visible, the re-run writes nothing more (a lost part stays
        lost). "aborted": the batch counts as not committed, the re-run writes all of it again
        (a visible part appears twice). Run recover() first: it settles what can be proven.
        """
        if decision not in DECISIONS:
            raise ResolutionRefused(f"decision must be one of {DECISIONS}, got {decision!r}")
        if not note.strip():
            raise ResolutionRefused("a resolution needs a note saying who decided and why")
        self.bind()
        session = Session(self.log)
        state = session.state.batch(batch)
        if state.status not in (BatchStatus.PREPARED, BatchStatus.PARTIAL):
            raise ResolutionRefused(
                f"batch {batch} is {state.status.value}: only a batch left prepared (undecided) "
                "or partial needs a resolution")
        seq = session.append(Resolved(batch, decision, note))
        if decision == "committed":
            self._remember_job(batch, seq)

    # ---- the commit path ----------------------------------------------------------------------

    def _commit_fresh(self, session: Session, batch: str, handles: Sequence[Handle],
                      offsets: SourceOffsets | None = None,
                      described: Future[dict[str, TransactionDescription]] | None = None
                      ) -> CommitReport:
        """Commit `handles` (docs/design.md section 2, steps 2-7); `described`: guard 3's
        DescribeTransactions of these handles, if already sent."""
        if not handles and offsets is not None:
            return self._commit_offsets_only(session, batch, offsets)
        if not handles:
            return self._commit_empty(session, batch, None)
        ids = [h.transactional_id for h in handles]
        descriptions = (described.result() if described is not None
                        else self.control.describe_transactions(ids))
        # The clock is read after the answer: the later the reading, the less time the guard
        # counts as left.
        now_ms = self.clock_ms()
        warn_clock_outliers(handles, now_ms)
        failed = check_before_intent(handles, descriptions, now_ms, self.margin_ms)
        if failed:
            reason = "; ".join(f"{t}: {why}" for t, why in sorted(failed.items()))
            self._fence_recorded(session, Aborted(batch, tuple(handles), reason[:2000], None))
            raise GuardFailed(batch, failed)
        if offsets is not None:
            offsets = self._attach_offsets(session, batch, handles, offsets)
        crash_point("coordinator.before_intent")
        intent_seq = session.append(Prepared(batch, tuple(handles), offsets))
        crash_point("coordinator.after_intent")
        # The pool's open ids, for the `committed` record's orphans, asked while the
        # EndTxns are in flight (one round trip less before commit() returns): the intent's own
        # ids are protected whatever state the listing shows them in, and any other open id is
        # open before and after the EndTxns alike. (On the settling path its answer is unused.)
        listing = self.control.start_list_transactions(self.prefix, states=[TxnState.ONGOING])
        answers = self._end_in_order(handles)
        fates = {txn_key(h): fate_of_end_txn(answers.get(h.transactional_id)) for h in handles}
        if any(v.fate is not Fate.COMMITTED for v in fates.values()):
            # Some EndTxn answers prove nothing: the log check decides, exactly as in recovery.
            return self._settle_after_end(session, batch, {
                k: v for k, v in fates.items() if v.fate is not Fate.UNDECIDED})
        orphans = self._open_orphans(session, ids, listing.result())
        seq = session.append(Committed(batch, intent_seq, orphans))
        crash_point("coordinator.after_committed_record")
        self._remember_job(batch, seq)
        # A broker killed mid-commit can drop the markers of a commit for good (stranded.py).
        # They must be released before any later transaction on the same ids touches those
        # partitions: its markers end the stranded records too, and an abort loses them (found by
        # the torture suite). So a commit returns only once its markers landed or were released.
        self._verify_markers(session, batch)
        self._fence_orphans(batch, orphans, then=lambda: self._purge(session))
        return CommitReport(batch, "committed", committed=tuple(ids), orphans=orphans)

    def _attach_offsets(self, session: Session, batch: str, handles: Sequence[Handle],
                        offsets: SourceOffsets) -> SourceOffsets:
        """The source offsets into the transaction committed last (source_offsets.py), before
        the intent; if the cluster refuses them, the batch is aborted whole."""
        carrier = carrier_of(handles)
        assert carrier is not None
        try:
            return attach(self.control, batch, carrier, offsets)
        except SourceOffsetsRefused as exc:
            self._fence_recorded(session, Aborted(batch, tuple(handles), exc.reason[:2000], None))
            raise

    def _commit_offsets_only(self, session: Session, batch: str,
                             offsets: SourceOffsets) -> CommitReport:
        """A batch that wrote no record still moves the group's offsets: an intent that names
        them (no transaction, no carrier), a plain commit of them, the outcome. Recovery repeats
        the commit for an intent left without outcome."""
        intent_seq = session.append(Prepared(batch, (), offsets.with_carrier(None)))
        crash_point("coordinator.after_intent")
        commit_plain(self.control, batch, offsets)
        return self._commit_empty(session, batch, intent_seq)

    def _commit_empty(self, session: Session, batch: str, intent_seq: int | None) -> CommitReport:
        """The outcome of a batch with no transaction to commit. Attempts that lost may still
        have written: the record names the pool's open unnamed ids and they are fenced, as after
        a commit of transactions."""
        orphans = self._open_orphans(session, ())
        seq = session.append(Committed(batch, intent_seq, orphans))
        self._remember_job(batch, seq)
        if orphans:
            self._release_stranded(session)  # a fence must not abort stranded records
        self._fence_orphans(batch, orphans, then=lambda: self._purge(session))
        return CommitReport(batch, "empty", orphans=orphans)

    def _end_in_order(self, handles: Sequence[Handle]) -> dict[str, EndTxnOutcome]:
        reqs = [EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True) for h in handles]
        answers = dict(self.control.end_txns(reqs[:1], precheck=False))
        crash_point("coordinator.after_endtxn_1")
        if len(reqs) > 1:
            if len(reqs) > 2:
                answers.update(self.control.end_txns(reqs[1:-1], precheck=False))
            crash_point("coordinator.after_endtxn_n_minus_1")
            answers.update(self.control.end_txns(reqs[-1:], precheck=False))
        crash_point("coordinator.after_all_endtxn")
        return answers

    def _settle_after_end(self, session: Session, batch: str,
                          answered: dict[TxnKey, Verdict]) -> CommitReport:
        state = session.state.batch(batch)
        report = settle(session, self.control, [state], prefix=self.prefix,
                        wait_ms=self.settle_wait_ms, sweep=False, name_orphans=True, answered=answered)
        report.raise_if_undecided()
        b = report.batches[0]
        if b.outcome is BatchOutcome.COMMITTED:
            self._remember_job(batch, b.recorded_seq)
            self._verify_markers(session, batch)
            self._fence_orphans(batch, b.orphans, then=lambda: self._purge(session))
            return CommitReport(batch, "committed",
                                committed=tuple(h.transactional_id for h in b.handles),
                                orphans=b.orphans, recovery=report)
        if b.outcome is BatchOutcome.ABORTED:
            raise BatchAborted(batch, "every transaction was aborted before its commit: "
                               + "; ".join(h.reason for h in b.handles)[:1000])
        raise BatchPartlyCommitted(batch, b.committed_partitions, b.lost_partitions)

    # ---- helpers ------------------------------------------------------------------------------

    def _fence_recorded(self, session: Session, record: Aborted | Duplicates) -> tuple[str, ...]:
        """Append `record` (which names the ids), then fence them. Nothing to fence: no record.
        FenceFailed if the broker refused a fence (the record stands)."""
        if isinstance(record, Aborted):
            ids = tuple(h.transactional_id for h in record.handles)
            done = (f"batch {record.batch}: its transactions {list(ids)} are recorded as never to "
                    f"be committed ({record.reason[:300]})")
        else:
            ids = record.ids
            done = (f"batch {record.batch} is committed, and the re-run's transactions "
                    f"{list(ids)} are recorded as its duplicates, never to be committed")
        if not ids:
            return ()
        self._release_stranded(session)  # a fence must not abort stranded records (commit())
        session.append(record)
        failed = fence_failures(self.control.fence(ids))
        if failed:
            raise FenceFailed(record.batch, failed, done)
        return ids

    def _open_orphans(self, session: Session, ids: Collection[str],
                     listed: Sequence[TransactionListing] | None = None) -> tuple[str, ...]:
        """The pool's open ids that no pending intent names and `ids` (the batch's) do not: the
        losing attempts a `committed` record names (docs/design.md section 2, driver step 5).
        `listed`: the pool's open transactions if already asked (else asked here)."""
        open_ids = listed if listed is not None else self.control.list_transactions(
            self.prefix, states=[TxnState.ONGOING])
        return unnamed_open(self.prefix, (t.transactional_id for t in open_ids),
                            protected=session.state.pending_ids() | set(ids))

    def _fence_orphans(self, batch: str, orphans: Sequence[str],
                      then: Callable[[], None] | None = None) -> None:
        """Fence the orphans a `committed` record of `batch` named, run `then`, and raise
        FenceFailed if a fence failed: the batch is committed, the report must not say all went
        well."""
        failed = fence_failures(self.control.fence(orphans)) if orphans else {}
        crash_point("coordinator.during_sweep")
        if then is not None:
            then()
        if failed:
            raise FenceFailed(batch, failed, f"batch {batch} is committed (nothing of it is lost)")

    def _observe(self, event: str, batch: str, outcome: str,
                 results: Sequence[WriteResult | None], committed: int,
                 began: float) -> observe.BatchFigures:
        handles = [r.handle for r in results if r is not None and r.handle is not None]
        fig = observe.figures(event, batch, outcome, handles, committed=committed,
                              now_ms=self.clock_ms(), latency_ms=(time.monotonic() - began) * 1000)
        observe.log_batch(fig)
        return fig

    def _verify_markers(self, session: Session, batch: str,
                        only: Collection[str] | None = None) -> None:
        """A committed batch's markers landed, or were released (commit(), stranded.py); and so
        did those of every id the log holds as stranded. CommitUnverified if not: a commit
        whose markers are neither landed nor released is not a success."""
        try:
            report = self._release_stranded(session, only)
        except Exception as exc:
            raise CommitUnverified(batch, f"{type(exc).__name__}: {exc}") from exc
        if report.unreleased:
            raise CommitUnverified(batch, "committed transactions still hold partitions open "
                                   f"and were not released: {report.summary()}")

    def _release_stranded(self, session: Session, only: Collection[str] | None = None,
                          recheck_held: bool = True) -> StrandedReport:
        # Every committed batch the log still holds (or those in `only`), and those whose ids are
        # held as stranded: one read_committed ListOffsets per leader when nothing is stuck.
        held = session.state.stranded if recheck_held else ()
        committed = to_check(session.state.batches.values(), only, held)
        wait = self.stranded_wait_ms
        return release_stranded_commits(session, self.control, committed, wait_ms=wait,
                                        grace_ms=min(STRANDED_GRACE_MS, wait))

    def _batch_state(self, session: Session, batch: str) -> BatchState:
        """The batch as the log shows it; for a batch job, also as the job-id index does (its
        records may be purged). The log is read first: a purge indexes a job before its records
        go, so a job this read did not find in the log is in the index by the time it is asked."""
        state = session.state.batch(batch)
        if self.binding.owner_kind != OwnerKind.JOB or state.status is BatchStatus.COMMITTED:
            return state
        return job_state(state, self.log.index.get(_job_key(batch)) is not None)

    def _remember_job(self, batch: str, seq: int | None) -> None:
        # Job ids outlive purges in the index, so a late re-run of an old job still writes nothing.
        # Written here as soon as this call knows; _purge guarantees it for every other path.
        if self.binding.owner_kind != OwnerKind.JOB or seq is None:
            return
        with contextlib.suppress(KeyExists):  # recorded by an earlier call (a retry): same fact
            self.log.index.create(_job_key(batch), {"seq": seq})

    def _purge(self, session: Session) -> None:
        # Only the holder of the fence purges: a call that has just appended.
        if not session.appended:
            return
        plan = plan_purge(session.state, self.retain_batches, self.log.low_water_mark(),
                          jobs=self.binding.owner_kind == OwnerKind.JOB)
        if plan is None:
            return
        for job in plan.to_index:  # before the mark moves: a crash in between loses nothing
            self._remember_job(job.batch, job.last_seq)
        self.log.purge(plan.below)


def _job_key(batch: str) -> str:
    return f"job:{batch}"


def _handles_of(batch: str, results: Sequence[WriteResult | None],
                allow_failed: bool) -> tuple[list[Handle], list[int]]:
    handles: list[Handle] = []
    skipped: list[int] = []
    seen: dict[int, str] = {}
    for r in results:
        if r is None:
            if allow_failed:
                continue
            raise InvalidResults(f"commit of batch {batch} got a failed task (None): Spark commits "
                                 "only when every task succeeded")
        if r.batch != batch:
            raise InvalidResults(f"a result of batch {r.batch} was given to batch {batch}")
        if r.kind is ResultKind.SKIPPED:
            skipped.append(r.task_partition)
        if r.kind is not ResultKind.PRECOMMITTED:
            continue
        if r.handle is None:
            raise InvalidResults(f"a pre-committed result of partition {r.task_partition} has no "
                                 "handle")
        tid = r.handle.transactional_id
        if not allow_failed and r.task_partition in seen:
            raise InvalidResults(f"batch {batch}: two results for Spark partition "
                                 f"{r.task_partition} ({seen[r.task_partition]}, {tid})")
        seen[r.task_partition] = tid
        handles.append(r.handle)
    return handles, skipped
