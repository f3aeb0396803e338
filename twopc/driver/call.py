"""One driver call: the log session it reads and appends through, and the only door through which
it ends, fences or releases a transaction (docs/design.md sections 5 and 8).

PySpark runs each commit() and abort() in a fresh process, so a driver call reads the whole log
afresh and keeps nothing from an earlier one. Two rules of the protocol are kept here, in the
door every path goes through, rather than by the order of calls in each path:

- every EndTxn, fence, release and offsets transaction follows a record this call appended
  that names the ids it touches: the log is the fence between drivers, so a paused old driver
  can act only on what it recorded itself, and its next append fails (`ProtocolViolation`
  otherwise). One exception, `begin_offsets`: a batch's offsets transaction is begun before its
  intent, on the query's offsets id, which no task uses (see there);
- the consumer group's offsets move only after a full check of the markers in this call, and
  only as far as `plan_offsets` allows (`move_source_offsets`);
- stranded commits are released before any fence: a later transaction on a stranded commit's id
  would end the committed records with its own ending, an abort included (stranded.py);
- an id held as stranded is never fenced, nor named an orphan: its open transaction may be our
  own release cut short before its EndTxn, which only its commit saves (a later check finishes it).

The job index (a batch job's id outlives the purge of its records) and the purge are here too:
both are the holder's of the fence, the call that has just appended.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpoint import Log
from checkpoint.memo import Memo
from twopc.control import (
    ControlClient,
    ControlError,
    EndTxnOutcome,
    EndTxnRequest,
    FenceResult,
    ReleaseResult,
    TxnState,
)
from twopc.crashpoints import crash_point
from twopc.driver.source_offsets import OpenOffsets, begin, commit_alone, finish
from twopc.driver.stranded import (
    StrandedReport,
    prove_patiently,
    raise_losses,
    release_stranded_commits,
    without_acknowledged,
)
from twopc.errors import (
    CommitUnverified,
    DataLossError,
    FenceFailed,
    LogOwnershipLost,
    ProtocolViolation,
)
from twopc.log.jobs import batch_state, remember_job
from twopc.log.session import Session, check_binding
from twopc.protocol.clock import DEFAULT_MARGIN_MS
from twopc.protocol.copies import RepairSettings
from twopc.protocol.holds import HoldProof, acknowledged_in, loss_entry_key, to_check
from twopc.protocol.log_records import (
    Aborted,
    Committed,
    Copying,
    Duplicates,
    LogRecord,
    OffsetsCommitted,
    Orphans,
    Partial,
    Prepared,
    Released,
    RollForward,
)
from twopc.protocol.offsets import SourceOffsets, SourceOffsetsError, alone_id, own_transaction
from twopc.protocol.owner import Owner, OwnerKind
from twopc.protocol.plans import OffsetsPlan, plan_offsets, plan_purge, unnamed_open
from twopc.protocol.pool import (
    DEFAULT_FULL_SWEEP_INTERVAL_MS,
    DEFAULT_SLOTS,
    batch_pool,
    full_sweep_due,
)
from twopc.protocol.state import BatchState, BatchStatus, LogState, TxnKey, txn_key

log = logging.getLogger("twopc.driver")

# A committed transaction's partition must look stranded this long before it is released: markers
# can lag the coordinator's answer by a few hundred milliseconds.
STRANDED_GRACE_MS = 1000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class DriverSettings:
    """What every driver call of one owner needs besides the log and the control client."""

    owner: Owner
    margin_ms: int = DEFAULT_MARGIN_MS  # guard 3: time a transaction must have left at the intent
    settle_wait_ms: int = 60000  # the log check's bounded wait for a stable partition
    retain_batches: int = 10  # finished batches the purge keeps whole
    stranded_wait_ms: int = 5000  # the stranded check's bounded wait
    repair: RepairSettings = field(default_factory=RepairSettings)  # copy-forward (copies.py)
    slots: int = DEFAULT_SLOTS  # the tasks' twopc.slotsPerPartition: the batch pool a commit describes
    full_sweep_interval_ms: int = DEFAULT_FULL_SWEEP_INTERVAL_MS  # pool.full_sweep_due
    sweep_clock_ms: Callable[[], int] = monotonic_ms  # an interval in this process: not wall time
    clock_ms: Callable[[], int] = wall_clock_ms


FencedRecord = Aborted | Duplicates | Orphans


def named_ids(record: LogRecord) -> tuple[str, ...]:
    """The transactional ids a record names: those a call may end, fence or release after it."""
    if isinstance(record, Prepared):  # and the id of the offsets' own transaction, if named
        return (*(h.transactional_id for h in record.handles),
                *own_transaction(record.offsets, bool(record.handles)))
    if isinstance(record, Aborted):
        return tuple(h.transactional_id for h in record.handles)
    if isinstance(record, Duplicates | Orphans | RollForward | Released | Copying):
        return tuple(record.ids)
    if isinstance(record, Committed):
        return tuple(record.orphans)
    if isinstance(record, Partial):
        return tuple(record.aborted)
    return ()


# The committed batches this process has proven since their commit: (log, owner id, batch,
# intent) of each batch whose every visible transaction one call's checks proved from the log
# (`DriverCall._to_prove`). Lost on a restart, which is the point: the first check after one
# proves the newest batch again.
_first_look_done: Memo[tuple[str, str, str, int | None], bool] = Memo(1024)

# When this process last listed each owner's whole pool, by `sweep_clock_ms` (log, owner id):
# `pool.full_sweep_due` decides from it. Lost on a restart: a new process lists first.
_full_sweeps: Memo[tuple[str, str], int] = Memo(1024)


class DriverCall:
    """One call's session over the log, and its door to the transactions it touches."""

    def __init__(self, log: Log, control: ControlClient, settings: DriverSettings,
                 first_look: bool = True) -> None:
        check_binding(log, settings.owner, create=True)
        self.first_look = first_look
        self.log = log
        self.control = control
        self.settings = settings
        self.session = Session(log)
        self._named: set[str] = set()
        # The transactions (id, producer id, epoch) this call asked to commit or recorded
        # committed: the log must prove their records ended committed (`_to_prove`) before the
        # call reports them so or moves their source offsets. Kept per transaction, not per
        # batch: a repair's or a copy's new transactions join a batch proven earlier in the call.
        self._must_prove: set[TxnKey] = set()
        self._proven: set[TxnKey] = set()  # those this call's checks have looked at
        # What the last full stranded check covered: the committed batches and the held ids.
        self._released: tuple[frozenset[tuple[str, int | None]], frozenset[str]] | None = None

    @property
    def state(self) -> LogState:
        return self.session.state

    @property
    def owner(self) -> Owner:
        return self.settings.owner

    # ---- the log --------------------------------------------------------------------------

    def append(self, record: LogRecord) -> int:
        """Append at the next number (LogOwnershipLost if another driver took it); from then on
        this call may act on the ids the record names."""
        seq = self.session.append(record)
        self._named.update(named_ids(record))
        if isinstance(record, (Committed, Partial)):
            # A recovery that finds the EndTxns answered already (the process before it died
            # after sending them) records the batch committed without sending one: what it
            # records committed is proven as what it commits is.
            kept = self.state.batches[record.batch].committed
            self._must_prove.update(txn_key(h) for h in kept.values())
        return seq

    def batch_state(self, batch: str) -> BatchState:
        return batch_state(self.log, self.owner, self.state, batch)

    def remember_job(self, batch: str, seq: int | None) -> None:
        if self.owner.kind is OwnerKind.JOB and seq is not None:
            remember_job(self.log, batch, seq)

    def purge(self) -> None:
        """Only the holder of the fence purges: a call that has just appended."""
        if not self.session.appended:
            return
        # From a stale view it could cut a batch a newer driver holds (and then never checks).
        self.session.confirm_owner()
        plan = plan_purge(self.state, self.settings.retain_batches, self.log.low_water_mark(),
                          jobs=self.owner.kind is OwnerKind.JOB)
        if plan is None:
            return
        for job in plan.to_index:  # before the mark moves: a crash in between loses nothing
            self.remember_job(job.batch, job.last_seq)
        self.log.purge(plan.below)

    # ---- the door -------------------------------------------------------------------------

    def _require_named(self, ids: Iterable[str], what: str) -> None:
        unnamed = sorted(set(ids) - self._named)
        if unnamed:
            raise ProtocolViolation(f"{what} of {unnamed} without a record of this call naming "
                                    "them first (docs/design.md section 5)")

    def end_txns(self, requests: Sequence[EndTxnRequest]) -> dict[str, EndTxnOutcome]:
        """EndTxn for ids a record of this call names. Each commit asked is noted before it is
        sent (its answer may be lost after it committed): this call's check proves the batch from
        the log (`_to_prove`)."""
        self._require_named((r.transactional_id for r in requests), "EndTxn")
        self._must_prove.update((r.transactional_id, r.producer_id, r.epoch)
                                  for r in requests if r.commit)
        return self.control.end_txns(requests, precheck=False)

    def fence(self, record: FencedRecord) -> tuple[tuple[str, ...], dict[str, str]]:
        """Release stranded commits, append `record`, then fence the ids it names. Returns the
        ids and the fences that failed (id -> the broker's answer). Nothing to fence: no record."""
        ids = named_ids(record)
        if not ids:
            return (), {}
        self._ensure_released()
        self.append(record)
        return ids, self._fence(ids)

    def fence_recorded(self, record: Aborted | Duplicates) -> tuple[str, ...]:
        """`fence`, raising FenceFailed if the broker refused one (the record stands)."""
        ids, failed = self.fence(record)
        if failed:
            if isinstance(record, Aborted):
                done = (f"batch {record.batch}: its transactions {list(ids)} are recorded as "
                        f"never to be committed ({record.reason[:300]})")
            else:
                done = (f"batch {record.batch} is committed, and the re-run's transactions "
                        f"{list(ids)} are recorded as its duplicates, never to be committed")
            raise FenceFailed(record.batch, failed, done)
        return ids

    def fence_named(self, ids: Sequence[str], prove: bool = True) -> dict[str, str]:
        """Fence ids that a record of this call already names (a `committed` record's orphans),
        stranded commits released first. Returns the fences that failed. `prove` False: the
        check before the fence leaves the proof of this call's commits to the caller's check
        after it (`release_stranded`)."""
        if not ids:
            return {}
        self._require_named(ids, "a fence")
        # Only while the log's last record is still this call's (LogOwnershipLost otherwise): a
        # driver that appended since (a run of the same job that took the lease over, a second
        # driver of a query) is in charge, its recovery fenced these ids itself, and a
        # transaction of its own may be on one of them by now (the next job's, let in after it:
        # tests/spark/test_lease_ends_before_fences.py). One read of the log, after the stranded
        # check (which can take seconds), right before the fences.
        self._ensure_released(prove)
        self.session.confirm_owner()
        return self._fence(ids)

    def _fence(self, ids: Sequence[str]) -> dict[str, str]:
        held = [t for t in ids if t in self.state.stranded]
        if held:  # its open transaction may be our release cut short: a check finishes it
            log.warning("twopc: not fencing %s: held as stranded commits (a later check "
                        "releases or finishes them)", held)
        rest = [t for t in ids if t not in self.state.stranded]
        return fence_failures(self.control.fence(rest)) if rest else {}

    def commit_offsets_alone(self, batch: str, offsets: SourceOffsets) -> None:
        """The source offsets of a batch without records, in a transaction of their own on the id
        a record of this call names as their carrier (source_offsets.py `commit_alone`); stranded
        commits released first, as before a fence (it starts with InitProducerId). Only for
        intents written before issue 30 item 2 (settle.py); since then `move_source_offsets`."""
        assert offsets.carrier is not None
        self._require_named((offsets.carrier,), "an offsets transaction")
        self._ensure_released()
        commit_alone(self.control, batch, offsets, self.settings.stranded_wait_ms / 1000,
                     confirm_owner=self.session.confirm_owner)

    def begin_offsets(self, batch: str, offsets: SourceOffsets) -> OpenOffsets:
        """Begin batch `batch`'s offsets transaction before its intent names it (the door's one
        exception): so that the cluster's refusal (an unknown source topic, a group with members)
        aborts the batch whole, before anything of it is decided. Safe without a record: the id
        is the query's offsets id (`alone_id`), which no task uses, so a paused driver's
        InitProducerId there can at most abort another call's offsets transaction in flight, which
        then fails loud and is redone; and nothing is committed on it before the intent and a full
        check of the markers (`move_source_offsets`). SourceOffsetsRefused if refused."""
        assert offsets.carrier is not None and offsets.deferred
        opened = begin(self.control, batch, offsets)
        assert opened is not None  # (only a redo compares with the group first)
        return opened

    def move_source_offsets(self, opened: OpenOffsets | None = None) -> OffsetsPlan:
        """Move the consumer group to the end offsets of the newest batch `plan_offsets` allows,
        after a full check of the markers in this call (which proves every committed batch not
        held visible), in their own transaction, then record it (`offsets_committed`). `opened`:
        the transaction this call began before its intent (`begin_offsets`), ended if it holds the
        offsets to move, else fenced. Returns the plan (what moved, what waits and why).
        SourceOffsetsError if the transaction fails: nothing records the offsets moved, and the
        next call (a re-run, recovery) moves them again."""
        if opened is None and not any(b.offsets_pending for b in self.state.batches.values()):
            return OffsetsPlan()  # nothing waits to move: no check needed
        self._ensure_released()
        plan = plan_offsets(self.state)
        if plan.waiting:
            log.warning("twopc: the source offsets of batches %s wait: batch %s is %s",
                        list(plan.waiting), plan.blocked_by, plan.why)
        if plan.batch is None or plan.offsets is None:
            if opened is not None:
                self.abandon_offsets(opened)
            return plan
        tid = str(plan.offsets.carrier)
        if tid not in self._named:
            self.append(RollForward((tid,)))
        wait_s = self.settings.stranded_wait_ms / 1000
        done = False
        if opened is not None and opened.batch == plan.batch and opened.offsets == plan.offsets:
            try:
                finish(self.control, opened, wait_s)  # fences it if it fails
                done = True
            except SourceOffsetsError as exc:
                # It may have timed out while the call settled or checked (its timeout runs from
                # before the intent), or its answer was lost: once more, as a later call would.
                log.warning("twopc: %s; committing them again in a new transaction", exc)
        elif opened is not None:
            self.abandon_offsets(opened)
        if not done and not commit_alone(self.control, plan.batch, plan.offsets, wait_s,
                                         confirm_owner=self.session.confirm_owner):
            log.warning("twopc: group %r already stands past batch %s's source offsets (an "
                        "earlier call moved it further and did not record it): left as it is",
                        plan.offsets.group, plan.batch)
        assert plan.intent_seq is not None
        self.append(OffsetsCommitted(plan.batch, plan.intent_seq))
        return plan

    def abandon_offsets(self, opened: OpenOffsets) -> None:
        """Abort a transaction `begin_offsets` began, now rather than at its timeout (its offsets
        are not to move, or not yet: a later call moves them in a transaction of its own). Part of
        the door's exception, for the same reason; a failure here only leaves it to its timeout."""
        with contextlib.suppress(ControlError):
            self.control.fence([str(opened.offsets.carrier)])

    def claim(self, ids: Iterable[str], what: str) -> dict[str, str]:
        """Before this call starts a producer on `ids` (its InitProducerId fences their open
        transactions): a record of this call must name them (ProtocolViolation otherwise), and
        stranded commits are released first, as before a fence. Returns the ids the caller must
        not start a producer on, with why: those held as stranded commits (their open transaction
        may be a release cut short, which only its commit saves)."""
        ids = tuple(ids)
        self._require_named(ids, what)
        self._ensure_released()
        return {t: why for t, why in self.state.in_use().items() if t in ids}

    def release(self, transactional_id: str, partitions: Sequence[tuple[str, int]],
                producer_id: int) -> ReleaseResult:
        """A stranded commit's release (stranded.py), after the `released` record naming it."""
        self._require_named((transactional_id,), "a release")
        return self.control.release_stranded(transactional_id, partitions,
                                             producer_id=producer_id)

    # ---- stranded commits -----------------------------------------------------------------

    def release_stranded(self, only: Collection[str] | None = None,
                         recheck_held: bool = True,
                         patient: Collection[str] | None = None,
                         own: str | None = None, prove: bool = True) -> StrandedReport:
        """Check the markers of every committed batch the log holds (or those in `only`) and of
        every id held as stranded, and release what is stuck (stranded.py); the bounded wait only
        for the batches in `patient` (all if None). `own`: the batch whose EndTxns this call
        sent and saw answered committed just now (its first look is this check). `prove` False:
        no proof from the log (`_to_prove`) in this check, only for a check that another follows
        before anything is reported (a commit's orphans fenced before its proof: coordinator.py
        `_finish_commit`); it counts as no full check, so `_ensure_released` runs one again."""
        held = self.state.stranded if recheck_held else ()
        committed = to_check(self.state.batches.values(), only, held)
        wait = self.settings.stranded_wait_ms
        report = release_stranded_commits(self, committed, wait_ms=wait,
                                          grace_ms=min(STRANDED_GRACE_MS, wait), patient=patient,
                                          prove=self._to_prove(committed, own) if prove
                                          else frozenset())
        self._proven.update(k for _, k in report.looked)
        for name in {name for name, _ in report.looked}:
            if not self._unproven(self.state.batches[name]):
                self._looked(self.state.batches[name])
        if only is None and recheck_held and prove:  # one that proved nothing covers nothing
            self._released = self._coverage()
        return report

    def _to_prove(self, batches: Sequence[BatchState], own: str | None) -> frozenset[TxnKey]:
        """The transactions whose records the log must prove ended committed, not only ended.

        Every one this call asked to commit or recorded committed (`_must_prove`: the commit's
        own, a recovery's roll-forward, a repair's, a copy's): an outside abort
        (`kafka-transactions.sh abort`) of a pre-committed transaction writes ABORT markers to
        its partitions and tells the coordinator nothing, which then accepts the commit; the
        records ended, aborted, and nothing but the log tells. And every one of the newest
        committed batch other than `own`, unless this process has proven it before: its call
        may have died between its `committed` record and its check, and what ended its records
        since (an outside abort after lost markers) ends them aborted. Only the newest: a
        batch's commit call returns before the next batch's begins, and a call that fails stops
        the query or job until recovery or the next call, which looks first. (A loss an
        operator acknowledged is proven again and not raised: `acknowledged_losses`.)"""
        keys = self._must_prove - self._proven  # the check asks only about the visible ones
        if self.first_look:
            # Newest but for the batches this call committed or recorded committed (proven as
            # such): a recovery's roll-forward, a settling after an unclear EndTxn, must not take
            # the first look from the batch before them, whose call may have died before its
            # check (and memoized, it would never be looked at in this process).
            committed = sorted((b for b in batches if b.committed and b.batch != own
                                and b.status in (BatchStatus.COMMITTED, BatchStatus.PARTIAL)),
                               key=lambda b: b.intent_seq or 0, reverse=True)
            newest = next((b for b in committed if not self._recorded_here(b)), None)
            if newest is not None and self._unlooked(newest):
                keys |= self._unproven(newest)
        return frozenset(keys)

    def _recorded_here(self, batch: BatchState) -> bool:
        return any(txn_key(h) in self._must_prove for h in batch.committed.values())

    def _unproven(self, batch: BatchState) -> frozenset[TxnKey]:
        """The batch's visible transactions this call's checks have not proven."""
        return frozenset(txn_key(h) for h in batch.committed.values()) - self._proven

    def _unlooked(self, batch: BatchState) -> bool:
        """Neither seen nor proven by this process: the batch needs its first look."""
        return not _first_look_done.get(self._look_key(batch)) and bool(self._unproven(batch))

    def acknowledged_losses(self, batch: str) -> frozenset[TxnKey]:
        """The transactions of `batch` whose loss an operator acknowledged
        (`Recovery.acknowledge_loss`): proven aborted again, they are not raised again (a repair
        of the batch proves its transactions anew). Read only once a loss is found."""
        entries = self.loss_acknowledgments(batch)
        visible = ([txn_key(h) for h in self.batch_state(batch).committed.values()]
                   if entries else [])
        return frozenset().union(*(acknowledged_in(e, visible) for e in entries))

    def loss_acknowledgments(self, batch: str) -> list[dict[str, Any]]:
        """The index entries acknowledging losses of `batch`, in the order they were made
        (`holds.loss_entry_key`)."""
        entries: list[dict[str, Any]] = []
        while (entry := self.log.index.get(loss_entry_key(batch, len(entries) + 1))) is not None:
            entries.append(entry)
        return entries

    def look_at(self, batch: str) -> None:
        """The first look at one committed batch, reading only: a re-run of a committed job
        writes nothing and takes no lease (another job of the family may be running; unless its
        own dead run left one: spark/driver.py `_take_over_committed`), so it records nothing,
        yet it reports the job committed, and the run that committed it may have died before
        its check (`_to_prove`). StrandedCommitAborted if the log proves
        any of its committed records aborted; CommitUnverified if the log cannot answer yet (a
        leader away, or the records still held open: not visible, so not reported committed;
        `twopc recover` or the family's next job finishes the check)."""
        state = self.batch_state(batch)
        if not self.first_look or not state.committed:
            return
        if not self._unlooked(state):
            # Looked at by a check that held what it could not prove (stranded.py): while held,
            # its records are not known visible, so not reported committed.
            self.raise_if_held(batch)
            return
        handles = [(batch, h) for _, h in sorted(state.committed.items())]
        evidence = without_acknowledged(self, handles, prove_patiently(self.control, handles))
        raise_losses(handles, evidence.aborted)
        if evidence.retry:
            raise CommitUnverified(batch, "the log cannot show yet that its records ended "
                                   "committed: " + "; ".join(sorted(evidence.retry.values())))
        for tid, (proof, why) in sorted(evidence.proofs.items()):
            if proof is HoldProof.UNPROVEN:
                log.warning("twopc: batch %s, %s: the log cannot tell whether its committed "
                            "records ended committed (%s)", batch, tid, why)
        self._looked(state)

    def raise_if_held(self, batch: str) -> None:
        """CommitUnverified if ids of `batch`'s committed transactions are held for it: a check
        could not prove yet that its records ended committed, so they are not known visible."""
        state = self.batch_state(batch)
        held = sorted({h.transactional_id for h in state.committed.values()
                       if h.transactional_id in self.state.stranded
                       and batch in self.state.stranded[h.transactional_id].batches})
        if held:
            raise CommitUnverified(batch, f"{', '.join(held)} held: the log has not shown yet "
                                   "that its records ended committed")

    def _look_key(self, batch: BatchState) -> tuple[str, str, str, int | None]:
        return (self.log.url, self.owner.owner_id, batch.batch, batch.intent_seq)

    def _looked(self, batch: BatchState) -> None:
        _first_look_done.put(self._look_key(batch), True)

    def verify_markers(self, batch: str, only: Collection[str] | None = None,
                       own: bool = False) -> None:
        """A committed batch's markers landed, or were released. CommitUnverified if not: a
        commit whose markers are neither landed nor released is not a success.

        The check looks at every committed batch the log holds and every held id too (their
        stranded commits are released here, before any later transaction on their ids), but only
        the batch's own transactions can fail it: what is stuck or unreadable elsewhere (a
        partition whose leader is down, among an older batch's) stays held, no task takes those
        ids, and later checks look again (issue 30, item 5)."""
        crash_point("stranded.before_check")  # tests only: the torture suite pauses here
        try:
            report = self.release_stranded(only, patient={batch}, own=batch if own else None)
        except (DataLossError, LogOwnershipLost):
            raise  # committed records found aborted, another driver in charge: never wrapped
        except Exception as exc:
            raise CommitUnverified(batch, f"{type(exc).__name__}: {exc}") from exc
        mine = [n for n in report.unreleased if n.batch == batch]
        if mine:
            raise CommitUnverified(batch, "its committed transactions still hold partitions "
                                   "open and were not released: " + "; ".join(
                                       f"{n.transactional_id} {n.fate.value}: {report.why(n)}"
                                       for n in mine))

    def _coverage(self) -> tuple[frozenset[tuple[str, int | None]], frozenset[str]]:
        committed = frozenset((b.batch, b.intent_seq) for b in self.state.batches.values()
                              if b.status in (BatchStatus.COMMITTED, BatchStatus.PARTIAL))
        return committed, frozenset(self.state.stranded)

    def _ensure_released(self, prove: bool = True) -> None:
        # A full check since the last commit this call recorded covers every committed batch,
        # and it proved what this call committed (unless asked not to: `release_stranded`).
        pending = self._must_prove - self._proven
        if self._released != self._coverage() or (prove and pending and any(
                txn_key(h) in pending for b in self.state.batches.values()
                for h in b.committed.values())):
            self.release_stranded(prove=prove)

    # ---- reads ----------------------------------------------------------------------------

    def start_open_ids(self, partitions: int | None = None) -> Callable[[], list[str]]:
        """Ask the broker now which of the pool's ids are open (Ongoing), for a sweep; the
        returned function waits for the answer. The whole pool is listed (ListTransactions) when
        `pool.full_sweep_due` says so, always without `partitions`; otherwise only the ids a batch
        of `partitions` Spark partitions may have written with, and the offsets id, are described:
        a listing makes the broker scan every transactional id it knows, so its cost and the
        delay of the EndTxns beside it grow with the cluster (docs/design.md section 2 step 5)."""
        prefix, key = self.owner.prefix, (self.log.url, self.owner.owner_id)
        now_ms = self.settings.sweep_clock_ms()
        if full_sweep_due(partitions, self.settings.slots, _full_sweeps.get(key), now_ms,
                          self.settings.full_sweep_interval_ms):
            listing = self.control.start_list_transactions(prefix, states=[TxnState.ONGOING])

            def listed() -> list[str]:
                open_ids = [t.transactional_id for t in listing.result()]
                _full_sweeps.put(key, now_ms)
                return open_ids
            return listed
        assert partitions is not None  # else full_sweep_due is True
        described = self.control.start_open_among(
            [*batch_pool(prefix, partitions, self.settings.slots), alone_id(prefix)])
        return described.result

    def open_orphans(self, ids: Collection[str],
                     open_ids: Iterable[str] | None = None) -> tuple[str, ...]:
        """The pool's open ids that no pending intent names and `ids` (the batch's) do not: the
        losing attempts a `committed` record names (docs/design.md section 2, driver step 6).
        `open_ids`: `start_open_ids`' answer if already asked (else the whole pool, listed here)."""
        if open_ids is None:
            open_ids = self.start_open_ids()()
        return unnamed_open(self.owner.prefix, open_ids,
                            protected=self.protected_ids() | set(ids))

    def protected_ids(self) -> frozenset[str]:
        """Ids a sweep never names an orphan: those a pending intent names, and those held as
        stranded (their open transaction may be our release, cut short)."""
        return self.state.pending_ids() | frozenset(self.state.stranded)


def fence_failures(results: Mapping[str, FenceResult]) -> dict[str, str]:
    """The fences that did not happen, with the broker's answer."""
    return {t: r.error or "unknown error" for t, r in results.items() if not r.fenced}
