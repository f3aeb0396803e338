"""The driver's commit and abort of one batch (docs/design.md section 2, "Driver"; sections 4, 5).

A Coordinator keeps no state between calls: PySpark runs each commit() and abort() in a fresh
process, so each call reads the checkpoint log (a `DriverCall`), decides (twopc/protocol), and
acts only through the call's door, after a record that names what it touches. Crash points
(crashpoints.py) sit between the steps. Recovery of what earlier calls left is recovery.py.

EndTxn order: the first handle alone, then all but the last in parallel, then the last. The few
extra round trips (milliseconds, against the fsynced intent) buy two things: a crash can fall
after exactly 1 and after exactly n-1 answers (the `after_endtxn_1` and `after_endtxn_n_minus_1`
points), and the path the crash tests prove is the path production runs.
With twopc.commitSourceOffsets the batch's source offsets go in a transaction of their own, begun
before the intent (a refusal aborts the batch whole) and ended only once the batch's markers are
proven, after its outcome record (protocol/offsets.py says why; call.py `move_source_offsets`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from checkpoint import Log
from twopc.control import ControlClient, EndTxnOutcome, EndTxnRequest, TransactionDescription
from twopc.crashpoints import crash_point
from twopc.driver import observe
from twopc.driver.call import DriverCall, DriverSettings
from twopc.driver.copy_forward import CopyOutcome, try_copy
from twopc.driver.recovery_report import RecoveryReport
from twopc.driver.settle import settle
from twopc.driver.source_offsets import OpenOffsets
from twopc.errors import (
    BatchAborted,
    BatchPartlyCommitted,
    CopyForwardFailed,
    DataLossError,
    GuardFailed,
    LogOwnershipLost,
    TwopcError,
)
from twopc.protocol.clock import check_before_intent, warn_clock_outliers
from twopc.protocol.copies import RepairPolicy, plan_copy, rerun_replaces_lost
from twopc.protocol.enums import TextEnum
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.log_records import Aborted, Committed, Duplicates, Prepared
from twopc.protocol.offsets import SourceOffsets, SourceOffsetsError, SourceOffsetsRefused, needs_offsets
from twopc.protocol.owner import Owner, OwnerKind
from twopc.protocol.plans import CommitAction, partitioning_note, plan_abort, plan_commit
from twopc.protocol.state import BatchState, BatchStatus, TxnKey, txn_key
from twopc.protocol.verdicts import BatchOutcome, Fate, Verdict, fate_of_end_txn

# Not the `twopc` logger itself (its lines are JSON figures): a child, which reaches the same
# handlers (observe.show_in_worker_log).
_log = logging.getLogger(__name__)


class InvalidResults(ValueError):
    """The messages handed to commit()/abort() do not belong together (wrong batch, two winners)."""


class CommitStatus(TextEnum):
    COMMITTED = "committed"  # this call made the batch visible
    ALREADY_COMMITTED = "already_committed"  # an earlier call did: this one's are duplicates
    REPAIRED = "repaired"  # the part a partly committed earlier attempt had not made visible
    COPIED = "copied"  # what an earlier attempt decided and the broker aborted, copied forward
    EMPTY = "empty"  # no rows: committed with no transaction


class AbortOutcome(TextEnum):
    ROLLED_FORWARD = "rolled_forward"  # an open intent was the commit decision: committed
    FENCED = "fenced"  # the batch's unrecorded transactions were fenced


@dataclass
class CommitReport:
    batch: str
    status: CommitStatus
    committed: tuple[str, ...] = ()
    duplicates: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()  # fenced: open ids of the pool the intent does not name
    recovery: RecoveryReport | None = None
    figures: observe.BatchFigures | None = None  # what was logged (observe.metrics for Spark)
    notes: list[str] = field(default_factory=list)  # what else the caller should know
    copied_records: int = 0  # COPIED: the records the copies made visible (not the re-run's)


@dataclass
class AbortReport:
    batch: str
    fenced: tuple[str, ...] = ()
    recovery: RecoveryReport | None = None
    notes: list[str] = field(default_factory=list)


class Coordinator:
    """commit() and abort() of one owner's batches; every call opens its own `DriverCall`."""

    def __init__(self, log: Log, control: ControlClient, settings: DriverSettings) -> None:
        self.log = log
        self.control = control
        self.settings = settings

    @property
    def owner(self) -> Owner:
        return self.settings.owner

    def open_call(self) -> DriverCall:
        return DriverCall(self.log, self.control, self.settings)

    def commit(self, batch: str, results: Sequence[WriteResult | None],
               offsets: SourceOffsets | None = None) -> CommitReport:
        """Commit `batch`; with `offsets`, its source offsets too, once it is proven visible
        (source_offsets.py; a note says so if they wait for an earlier batch)."""
        began = time.monotonic()
        try:
            try:
                report = self._commit(batch, results, offsets)
            except LogOwnershipLost as lost:
                report = self._committed_by_another(batch, results, lost)
        except TwopcError as exc:
            self._observe("commit", batch, type(exc).__name__, results, 0, began)
            raise
        report.figures = self._observe("commit", batch, report.status, results,
                                       len(report.committed), began)
        warning = observe.age_warning(report.figures) if report.committed else None
        if warning is not None:
            _log.warning("twopc: %s", warning)
        return report

    def _commit(self, batch: str, results: Sequence[WriteResult | None],
                offsets: SourceOffsets | None) -> CommitReport:
        handles, skipped = _handles_of(batch, results, allow_failed=False)
        # Guard 3's DescribeTransactions, sent while the log is read (a read, so asking early
        # changes nothing; its answer serves only a fresh plan on this first read, below).
        described = (self.control.start_describe_transactions(
            [h.transactional_id for h in handles]) if handles else None)
        call = self.open_call()
        recovery: RecoveryReport | None = None
        swept: tuple[str, ...] = ()  # losing attempts fenced by the settling of an open intent
        unfenced: dict[str, str] = {}  # those of them whose fence failed (id -> why)
        for _ in range(2):  # at most one settling of an open intent, then a plan on firm ground
            state = call.batch_state(batch)
            if skipped and state.status is not BatchStatus.COMMITTED:
                reason = (f"Spark partitions {sorted(skipped)} skipped writing because the batch "
                          "looked committed, but the log does not show it committed")
                call.fence_recorded(Aborted(batch, tuple(handles), reason, None))
                raise BatchAborted(batch, reason)
            plan = plan_commit(state, handles)
            if plan.action is CommitAction.RECOVER_FIRST:
                recovery = settle(call, [state], sweep=False, name_orphans=True)
                recovery.raise_if_undecided()
                if recovery.batches[0].outcome is BatchOutcome.COMMITTED:
                    # Proven by the check of the "already committed" answer, next time round.
                    swept = recovery.batches[0].orphans
                    unfenced = _fence_orphans(call, swept)
                continue
            if plan.action is CommitAction.ALREADY_COMMITTED:
                # The answer lets Spark record the batch, so it is proven first, as a fresh
                # commit's is: the call that recorded it committed may have died before its check
                # (the first look falls on it, the newest batch). Before the duplicates' fence,
                # which would check first anyway; a failure leaves them open, unnamed, for a
                # later sweep or their timeout (no record, so never committed).
                call.verify_markers(batch)
                call.raise_if_held(batch)  # not proven yet: not known visible (as `look_at`)
                dups = call.fence_recorded(Duplicates(
                    batch, tuple(h.transactional_id for h in plan.duplicates)))
                _raise_failed_fences(batch, unfenced)
                report = CommitReport(batch, CommitStatus.ALREADY_COMMITTED, duplicates=dups,
                                      orphans=swept, recovery=recovery)
                if offsets is not None:  # an earlier attempt's may not have moved yet
                    _move_offsets(call, None, report)
                return report
            # Copy-forward (copy_forward.py): what was decided and aborted, from the log's copy.
            policy = self.settings.repair.policy
            copy = (plan_copy(state, handles, policy)
                    if plan.losses or state.status is BatchStatus.ABORTED
                    or rerun_replaces_lost(state, handles, policy) else None)
            not_copied: tuple[str, ...] = ()
            if copy is not None:
                try:
                    done = try_copy(call, copy, self.settings.repair)
                except CopyForwardFailed as exc:
                    if handles:  # the re-run's rows are never to be committed: fenced now
                        call.fence_recorded(Aborted(batch, tuple(handles),
                                                    str(exc)[:2000], None))
                    raise
                if done.copies:
                    return self._commit_copies(call, state, done, offsets, recovery)
                not_copied = done.decision.reasons
            if plan.losses:
                call.fence_recorded(Aborted(
                    batch, tuple(handles), "the re-run differs from the visible data", None))
                detail = [partitioning_note(state, len(results))]
                if not_copied:
                    detail.append("not copied forward: " + "; ".join(not_copied)[:1000])
                raise DataLossError(batch, plan.losses, "; ".join(d for d in detail if d))
            dups = call.fence_recorded(Duplicates(
                batch, tuple(h.transactional_id for h in plan.duplicates)))
            if plan.action is CommitAction.REPAIR and not needs_offsets(
                    state.offsets, (h.transactional_id for h in state.committed.values())):
                offsets = None  # the visible part carried them
            early = (described if plan.action is CommitAction.FRESH and recovery is None
                     else None)
            report = self._commit_fresh(call, batch, plan.to_commit, offsets, early,
                                        partitions=_partitions_of(results))
            report.duplicates = dups
            report.recovery = recovery
            if plan.action is CommitAction.REPAIR:
                report.status = CommitStatus.REPAIRED
            return report
        raise AssertionError("an open intent survived its own settling")  # settle records outcomes

    def copy_forward(self, batch: str, policy: RepairPolicy = RepairPolicy.COPY
                     ) -> CommitReport | None:
        """The operator's copy-forward (`twopc recover --repair copy`): commit the lost part of a
        batch left partial or aborted after its intent from the log's copy, with no re-run. None
        when the batch has nothing to copy; CopyForwardFailed when it cannot be copied."""
        call = self.open_call()
        state = call.batch_state(batch)
        plan = plan_copy(state, (), policy)
        if plan is None:
            return None
        done = try_copy(call, plan, replace(self.settings.repair, policy=policy))
        if not done.copies:
            raise CopyForwardFailed(batch, done.decision.reasons or ("not copied",))
        return self._commit_copies(call, state, done, state.offsets, None)

    def _commit_copies(self, call: DriverCall, state: BatchState, done: CopyOutcome,
                       offsets: SourceOffsets | None,
                       recovery: RecoveryReport | None) -> CommitReport:
        """Commit the copies of a batch's aborted transactions like any batch's handles; the
        source offsets go with them unless the visible part carried them (an intent written before
        issue 30 item 2). The offsets are the intent's (what was decided, as the records are),
        else the re-run's; they move once the copies are proven visible, as any batch's."""
        if state.offsets is not None:
            offsets = state.offsets.with_carrier(None)
        if not needs_offsets(state.offsets,
                             (h.transactional_id for h in state.committed.values())):
            offsets = None
        report = self._commit_fresh(call, state.batch, done.copies, offsets)
        report.status = CommitStatus.COPIED
        report.copied_records = done.records
        report.duplicates = done.duplicates
        report.recovery = recovery
        return report

    def _committed_by_another(self, batch: str, results: Sequence[WriteResult | None],
                              lost: LogOwnershipLost) -> CommitReport:
        """This call lost an append to another driver (recovery before another run, `twopc
        recover`, a concurrent run of the same job). If that driver committed this call's very
        transactions (it rolled this call's intent forward), the batch is committed with what
        this call wrote (issue 30, item 4): a batch job reports that, not a failure; a streaming
        query's driver still stops with `lost` (two drivers of one query: this one must not go on
        to its next batch), which then says so. Anything else: `lost`. Read only: nothing is
        appended, ended or fenced here (the log fence stands)."""
        if getattr(lost, "committed_by_this_call", False):  # `_finish_commit` said it already
            raise lost
        handles, _ = _handles_of(batch, results, allow_failed=False)
        if not handles:
            raise lost
        state = self.open_call().batch_state(batch)
        visible = ({txn_key(h) for h in state.committed.values()}
                   if state.status is BatchStatus.COMMITTED else set())
        if not all(txn_key(h) in visible for h in handles):
            raise lost
        note = (f"batch {batch} is committed with this call's {len(handles)} transactions, "
                "by another driver, which settled this call's intent while it was held up "
                f"(this call then lost record {lost.seq} of the log to it)")
        if self.owner.kind is not OwnerKind.JOB:
            if hasattr(lost, "add_note"):  # Python 3.11+
                lost.add_note(f"twopc: {note}")
            raise lost
        # Reported committed: proven first, reading only (that driver is in charge of the log).
        self.open_call().look_at(batch)
        _log.warning("twopc: %s", note)
        return CommitReport(batch, CommitStatus.COMMITTED,
                            committed=tuple(h.transactional_id for h in handles), notes=[note])

    def abort(self, batch: str, results: Sequence[WriteResult | None],
              reason: str = "Spark aborted the batch") -> AbortReport:
        """Spark's abort: roll an open intent forward (it is the commit decision), and fence the
        handles in `results` that no intent names (`reason`: why, in their record)."""
        began = time.monotonic()
        handles, _ = _handles_of(batch, results, allow_failed=True)
        call = self.open_call()
        report = AbortReport(batch)
        roll_first, _ = plan_abort(call.state.batch(batch), handles)
        undecided: Exception | None = None
        if roll_first:
            report.recovery = settle(call, [call.state.batch(batch)], sweep=False)
            try:
                report.recovery.raise_if_undecided()
            except Exception as exc:  # fence the others first, then report it
                undecided = exc
        state = call.batch_state(batch)
        _, others = plan_abort(state, handles)
        ids = tuple(h.transactional_id for h in others)
        try:
            if state.status is BatchStatus.COMMITTED:
                report.fenced = call.fence_recorded(Duplicates(batch, ids))
            else:
                report.fenced = call.fence_recorded(Aborted(batch, others, reason[:2000], None))
        except TwopcError as exc:
            self._observe("abort", batch, type(exc).__name__, results, 0, began)
            raise
        outcome: str = (AbortOutcome.ROLLED_FORWARD if report.recovery is not None
                        else AbortOutcome.FENCED)
        if undecided is not None:
            outcome = type(undecided).__name__
        self._observe("abort", batch, outcome, results, 0, began)
        if undecided is not None:
            raise undecided
        return report

    # ---- the commit path ----------------------------------------------------------------------

    def _commit_fresh(self, call: DriverCall, batch: str, handles: Sequence[Handle],
                      offsets: SourceOffsets | None = None,
                      described: Future[dict[str, TransactionDescription]] | None = None,
                      partitions: int | None = None) -> CommitReport:
        """Commit `handles` (docs/design.md section 2, steps 2-7); `described`: guard 3's
        DescribeTransactions of these handles, if already sent; `partitions`: the batch's Spark
        partitions, whose pool the orphan sweep may describe (else it lists the whole pool)."""
        if not handles and offsets is not None:
            return self._commit_offsets_only(call, batch, offsets, partitions)
        if not handles:
            return self._commit_empty(call, batch, None, partitions=partitions)
        ids = [h.transactional_id for h in handles]
        opened: OpenOffsets | None = None
        if offsets is not None:
            # Before guard 3: its InitProducerId may wait (a coordinator loading, an earlier
            # offsets transaction aborting), and the guard must count that time.
            offsets = offsets.deferred_on(self.owner.prefix)
            opened = self._begin_offsets(call, batch, handles, offsets)
        with _abandoned_on_error(call, opened):
            descriptions = (described.result() if described is not None
                            else self.control.describe_transactions(ids))
            # The clock is read after the answer: the later the reading, the less time the guard
            # counts as left.
            now_ms = self.settings.clock_ms()
            warn_clock_outliers(handles, now_ms)
            failed = check_before_intent(handles, descriptions, now_ms, self.settings.margin_ms)
            if failed:
                reason = "; ".join(f"{t}: {why}" for t, why in sorted(failed.items()))
                call.fence_recorded(Aborted(batch, tuple(handles), reason[:2000], None))
                raise GuardFailed(batch, failed)
            return self._decide_and_end(call, batch, handles, offsets, opened, partitions)

    def _decide_and_end(self, call: DriverCall, batch: str, handles: Sequence[Handle],
                        offsets: SourceOffsets | None, opened: OpenOffsets | None,
                        partitions: int | None) -> CommitReport:
        """The intent, the EndTxns, the outcome, the markers' check, the offsets."""
        ids = [h.transactional_id for h in handles]
        # The pool's open ids, for the `committed` record's orphans, asked while the intent is
        # made durable and the EndTxns are in flight (no round trip of its own: the broker works
        # on it while this thread waits on the intent's fsyncs, and its decoding, which holds the
        # GIL the append needs, is brief: `decode_describe_states`): the intent's own ids are
        # protected whatever state the answer shows them in, and any other open id is open
        # before and after the intent and the EndTxns alike. (On the settling path its answer is
        # unused.)
        open_ids = call.start_open_ids(partitions)
        crash_point("coordinator.before_intent")
        intent_seq = call.append(Prepared(batch, tuple(handles), offsets))
        crash_point("coordinator.after_intent")
        answers = _end_in_order(call, handles)
        fates = {txn_key(h): fate_of_end_txn(answers.get(h.transactional_id)) for h in handles}
        if any(v.fate is not Fate.COMMITTED for v in fates.values()):
            # Some EndTxn answers prove nothing: the log check decides, exactly as in recovery.
            return self._settle_after_end(call, batch, {
                k: v for k, v in fates.items() if v.fate is not Fate.UNDECIDED}, opened)
        orphans = call.open_orphans(ids, open_ids())
        seq = call.append(Committed(batch, intent_seq, orphans))
        crash_point("coordinator.after_committed_record")
        call.remember_job(batch, seq)
        report = CommitReport(batch, CommitStatus.COMMITTED, committed=tuple(ids), orphans=orphans)
        _finish_commit(call, batch, orphans, opened, report, own=True)
        return report

    def _begin_offsets(self, call: DriverCall, batch: str, handles: Sequence[Handle],
                       offsets: SourceOffsets) -> OpenOffsets:
        """The offsets' own transaction, begun before the intent (call.py `begin_offsets`); if
        the cluster refuses them, the batch is aborted whole."""
        try:
            return call.begin_offsets(batch, offsets)
        except SourceOffsetsRefused as exc:
            if handles:
                call.fence_recorded(Aborted(batch, tuple(handles), exc.reason[:2000], None))
            raise

    def _commit_offsets_only(self, call: DriverCall, batch: str, offsets: SourceOffsets,
                             partitions: int | None) -> CommitReport:
        """A batch that wrote no record still moves the group's offsets: an intent that names
        them and the id of their own transaction (`alone_id`; never a plain OffsetCommit:
        source_offsets.py `commit_alone` says why), the outcome, then the offsets, as for any
        batch (a call cut short leaves them to the next one)."""
        carried = offsets.deferred_on(self.owner.prefix)
        opened = self._begin_offsets(call, batch, (), carried)
        with _abandoned_on_error(call, opened):
            intent_seq = call.append(Prepared(batch, (), carried))
            crash_point("coordinator.after_intent")
            return self._commit_empty(call, batch, intent_seq, opened, partitions)

    def _commit_empty(self, call: DriverCall, batch: str, intent_seq: int | None,
                      opened: OpenOffsets | None = None,
                      partitions: int | None = None) -> CommitReport:
        """The outcome of a batch with no transaction to commit. Attempts that lost may still
        have written: the record names the pool's open unnamed ids and they are fenced, as after
        a commit of transactions."""
        orphans = call.open_orphans((), call.start_open_ids(partitions)())
        seq = call.append(Committed(batch, intent_seq, orphans))
        crash_point("coordinator.after_committed_record")
        call.remember_job(batch, seq)
        report = CommitReport(batch, CommitStatus.EMPTY, orphans=orphans)
        _finish_commit(call, batch, orphans, opened, report, verify=False)
        return report

    def _settle_after_end(self, call: DriverCall, batch: str,
                          answered: dict[TxnKey, Verdict],
                          opened: OpenOffsets | None) -> CommitReport:
        state = call.state.batch(batch)
        report = settle(call, [state], sweep=False, name_orphans=True, answered=answered)
        report.raise_if_undecided()
        b = report.batches[0]
        if b.outcome is BatchOutcome.COMMITTED:
            call.remember_job(batch, b.recorded_seq)
            done = CommitReport(batch, CommitStatus.COMMITTED,
                                committed=tuple(h.transactional_id for h in b.handles),
                                orphans=b.orphans, recovery=report)
            _finish_commit(call, batch, b.orphans, opened, done)
            return done
        if b.outcome is BatchOutcome.ABORTED:
            raise BatchAborted(batch, "every transaction was aborted before its commit: "
                               + "; ".join(h.reason for h in b.handles)[:1000])
        raise BatchPartlyCommitted(batch, b.committed_partitions, b.lost_partitions)

    def _observe(self, event: str, batch: str, outcome: str,
                 results: Sequence[WriteResult | None], committed: int,
                 began: float) -> observe.BatchFigures:
        handles = [r.handle for r in results if r is not None and r.handle is not None]
        fig = observe.figures(event, batch, str(outcome), handles, committed=committed,
                              now_ms=self.settings.clock_ms(),
                              latency_ms=(time.monotonic() - began) * 1000)
        observe.log_batch(fig)
        return fig


def _end_in_order(call: DriverCall, handles: Sequence[Handle]) -> dict[str, EndTxnOutcome]:
    """EndTxn(commit) of the first handle, then all but the last, then the last."""
    reqs = [EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True) for h in handles]
    answers = dict(call.end_txns(reqs[:1]))
    crash_point("coordinator.after_endtxn_1")
    if len(reqs) > 1:
        if len(reqs) > 2:
            answers.update(call.end_txns(reqs[1:-1]))
        crash_point("coordinator.after_endtxn_n_minus_1")
        answers.update(call.end_txns(reqs[-1:]))
    crash_point("coordinator.after_all_endtxn")
    return answers


def _finish_commit(call: DriverCall, batch: str, orphans: Sequence[str],
                   opened: OpenOffsets | None, report: CommitReport, own: bool = False,
                   verify: bool = True) -> None:
    """After a commit's `committed` record: fence its orphans, verify its markers (and prove its
    records ended committed), purge, then move the source offsets as far as the log allows (this
    batch's, begun before the intent as `opened`). `own`: this call saw the batch's EndTxns
    answered committed (call.py `verify_markers`). `verify` False: a batch without
    transactions, nothing of its own to verify (the fences' check looks at the others).

    A broker killed mid-commit can drop the markers of a commit for good (stranded.py). They
    must be released before any later transaction on the same ids touches those partitions: its
    markers end the stranded records too, and an abort loses them (found by the torture suite).
    So a commit returns only once its markers landed or were released. The orphans are fenced
    before that check: a losing attempt that wrote to one of the batch's partitions before it
    holds the partition's last stable offset below the batch's records while it is open, and
    the proof that they ended committed reads only below it (a review found the batch's ids held
    and its offsets waiting a check). The fence's own check releases stranded commits first, as
    before any fence, and leaves the proof to the check after it.

    Another driver may have appended since this call's `committed` record (a re-run of the job
    that took it over: call.py `fence_named`): the batch is committed, by this call, and the
    fences are that driver's to send. This call still proves its batch, reading only (that
    driver's checks record what they hold). A batch job reports it committed with a note saying
    so; a streaming query's driver stops (`LogOwnershipLost`: two drivers of one query), with
    that note."""
    try:
        failed = _fence_orphans(call, orphans, prove=not verify)
    except LogOwnershipLost as lost:
        if verify:
            call.look_at(batch)
        _left_to_another(call, batch, orphans, lost, report)
        return
    if verify:
        call.verify_markers(batch, own=own)
    try:
        call.purge()
    except LogOwnershipLost as lost:
        _left_to_another(call, batch, orphans, lost, report)
        return
    _raise_failed_fences(batch, failed)
    if opened is not None:
        _move_offsets(call, opened, report)


def _left_to_another(call: DriverCall, batch: str, orphans: Sequence[str],
                     lost: LogOwnershipLost, report: CommitReport) -> None:
    """`_finish_commit` found another driver appending after this call's `committed` record."""
    note = (f"batch {batch} is committed by this call, but another driver appended to the "
            f"log after its `committed` record (record {lost.seq}): this call left the "
            f"fences of its {len(orphans)} orphan transaction(s) to that driver (a "
            "recovery's sweep; else the family's next job's, or their transaction timeout)")
    if call.owner.kind is not OwnerKind.JOB:
        lost.add_note(f"twopc: {note}")
        lost.committed_by_this_call = True  # type: ignore[attr-defined]
        raise lost
    _log.warning("twopc: %s", note)
    report.notes.append(note)


@contextlib.contextmanager
def _abandoned_on_error(call: DriverCall, opened: OpenOffsets | None) -> Iterator[None]:
    """A commit that fails after `begin_offsets` aborts the offsets' transaction at once (else it
    holds the group's offsets pending until its timeout; a later call moves them), unless this
    call lost the log to another driver: that one may have its own offsets transaction in flight
    on the id, and this call acts on nothing more."""
    try:
        yield
    except LogOwnershipLost:
        raise
    except BaseException:
        if opened is not None:
            call.abandon_offsets(opened)
        raise


def _move_offsets(call: DriverCall, opened: OpenOffsets | None, report: CommitReport) -> None:
    """Move the group (call.py `move_source_offsets`); the report says what waits and why."""
    try:
        plan = call.move_source_offsets(opened)
    except LogOwnershipLost:
        raise
    except Exception as exc:
        # The batch is committed by now; whatever failed (the checkpoint's append of the move, a
        # broker request) must not read as the batch failing.
        if opened is not None and not isinstance(exc, SourceOffsetsError):
            exc.add_note(f"twopc: batch {opened.batch} is committed (nothing of it is lost); its "
                         "source offsets are not recorded as moved: the next commit, a restart of "
                         "the query or `twopc recover` moves them (never backwards)")
        raise
    if plan.waiting:
        report.notes.append(
            f"the source offsets of batches {', '.join(plan.waiting)} are not committed to the "
            f"group yet: batch {plan.blocked_by} is {plan.why}; they move once it is proven "
            "visible (a later commit or `twopc recover`)")


def _fence_orphans(call: DriverCall, orphans: Sequence[str], prove: bool = False
                   ) -> dict[str, str]:
    """Fence the orphans a `committed` record of this call names, before its proof (the check
    ahead of the fences releases stranded commits and, unless `prove`, proves nothing:
    `_finish_commit` says why). Returns the fences that failed (`_raise_failed_fences`, once the
    batch is proven)."""
    failed = call.fence_named(orphans, prove=prove)
    crash_point("coordinator.during_sweep")
    return failed


def _raise_failed_fences(batch: str, failed: dict[str, str]) -> None:
    """FenceFailed if a fence of the orphans failed: the batch is committed, the report must
    not say all went well."""
    from twopc.errors import FenceFailed

    if failed:
        raise FenceFailed(batch, failed, f"batch {batch} is committed (nothing of it is lost)")


def _partitions_of(results: Sequence[WriteResult | None]) -> int | None:
    """The batch's Spark partitions: one result per partition, a missing one None. None without
    any result: nothing says which ids its tasks took, so the sweep lists the whole pool."""
    if not results:
        return None
    return max([len(results), *(r.task_partition + 1 for r in results if r is not None)])


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
