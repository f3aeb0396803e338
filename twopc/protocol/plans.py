"""What to do with a batch's handles, the pool's open ids and the log's old records. Pure.

    commit(b, handles)  ──plan_commit──> already committed / recover first / repair / fresh
    partial batch + re-run ──plan_repair──> duplicates, to commit, or the losses
    partial batch + the re-run's partition count ──partitioning_note──> why it differs, if known
    abort(b, handles) ──plan_abort──> roll the open intent forward first?, the handles to fence
    the pool's open ids ──unnamed_open──> the orphans every `committed` record names, then fenced
    a batch job's state + the job-id index ──job_state──> committed if either says so
    a job family's lease + a job about to start ──blocking_lease──> the run that refuses it, if any
    the log ──plan_purge──> the new low-water mark, and the committed jobs to index before it moves
    the log ──plan_offsets──> whose source offsets the group takes now, and what holds later ones

docs/design.md sections 2, 4, 5 and 6; tested in tests/protocol/test_decisions.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from twopc.errors import PartitionLoss
from twopc.protocol.enums import TextEnum
from twopc.protocol.handle import Handle
from twopc.protocol.offsets import SourceOffsets, alone_id
from twopc.protocol.pool import in_pool
from twopc.protocol.state import (
    BatchState,
    BatchStatus,
    JobLease,
    LogState,
    by_partition,
    same_txn,
)


class CommitAction(TextEnum):
    ALREADY_COMMITTED = "already_committed"  # fence `duplicates`; `retried` are the intent's own
    RECOVER_FIRST = "recover_first"  # an open intent: settle it, then plan again
    REPAIR = "repair"  # partly visible: fence `duplicates`, commit `to_commit`, or `losses`
    FRESH = "fresh"  # commit `to_commit`


@dataclass(frozen=True)
class CommitPlan:
    action: CommitAction
    to_commit: tuple[Handle, ...] = ()
    duplicates: tuple[Handle, ...] = ()
    retried: tuple[Handle, ...] = ()
    losses: tuple[PartitionLoss, ...] = ()


def plan_commit(state: BatchState, handles: Sequence[Handle]) -> CommitPlan:
    if state.status is BatchStatus.COMMITTED:
        named = state.intent + tuple(state.committed.values())
        retried = tuple(h for h in handles if any(same_txn(h, n) for n in named))
        dups = tuple(h for h in handles if h not in retried)
        return CommitPlan(CommitAction.ALREADY_COMMITTED, duplicates=dups, retried=retried)
    if state.status is BatchStatus.PREPARED:
        return CommitPlan(CommitAction.RECOVER_FIRST)
    if state.status is BatchStatus.PARTIAL:
        return plan_repair(state.committed, handles)
    return CommitPlan(CommitAction.FRESH, to_commit=tuple(handles))


def plan_repair(committed: Mapping[int, Handle], rerun: Sequence[Handle]) -> CommitPlan:
    """A partly visible batch: the re-run must reproduce every visible partition exactly.

    Then the visible result equals the re-run's output: its handles for visible partitions are
    duplicates, the others commit. Any visible partition the re-run does not reproduce (other
    checksum or count, or no rows) is a loss: nothing is committed.
    """
    by_p = by_partition(rerun)
    losses: list[PartitionLoss] = []
    for p, old in sorted(committed.items()):
        new = by_p.get(p)
        if new is None:
            losses.append(PartitionLoss(p, old.record_count, None, "the re-run wrote no rows"))
        elif new.checksum != old.checksum or new.record_count != old.record_count:
            losses.append(PartitionLoss(p, old.record_count, new.record_count,
                                        "the re-run's records differ (checksum)"))
    if losses:
        return CommitPlan(CommitAction.REPAIR, losses=tuple(losses))
    return CommitPlan(CommitAction.REPAIR,
                      to_commit=tuple(h for h in rerun if h.task_partition not in committed),
                      duplicates=tuple(h for h in rerun if h.task_partition in committed))


def partitioning_note(state: BatchState, rerun_partitions: int) -> str:
    """Why a re-run may not reproduce a partly visible batch although its source is deterministic:
    its Spark partition count is not the one the batch was decided with (a changed
    `repartition(n)`, source or shuffle partitioning), which `plan_repair`'s per-partition proof
    cannot bridge. Only the decided partitions that held records are known: a re-run with fewer
    partitions than the highest of them proves the change, one with more may be one. "" when
    nothing says so."""
    decided = sorted({*state.committed, *state.lost})
    if not decided or rerun_partitions <= 0:
        return ""
    if decided[-1] >= rerun_partitions:
        change = f"the partition count changed (it was at least {decided[-1] + 1})"
    elif decided[-1] + 1 < rerun_partitions:
        change = "the partition count may have changed"
    else:
        return ""
    return (f"the re-run has {rerun_partitions} Spark partitions and the batch was decided with "
            f"records in Spark partitions {decided}: {change}. A re-run repairs a partly "
            "committed batch only with the partitioning it was decided with: restore it, or let "
            "copy-forward repair the batch from the log's copy (twopc.repairPolicy=auto or copy)")


def plan_abort(state: BatchState, handles: Sequence[Handle]) -> tuple[bool, tuple[Handle, ...]]:
    """Spark's abort(b): (roll the open intent forward first?, the handles to fence).

    The intent is the commit decision, so its handles are never fenced here, nor committed ones.
    """
    named = state.intent + tuple(state.committed.values())
    others = tuple(h for h in handles if not any(same_txn(h, n) for n in named))
    return state.status is BatchStatus.PREPARED, others


def unnamed_open(prefix: str, open_ids: Iterable[str], protected: Iterable[str]) -> tuple[str, ...]:
    """Open transactions of the pool, or of the query's offsets id (one a call began and did not
    end: it crashed), that nothing recorded will commit: to be fenced."""
    keep = set(protected)
    offsets_id = alone_id(prefix)
    return tuple(sorted({t for t in open_ids
                         if (in_pool(prefix, t) or t == offsets_id) and t not in keep}))


# A batch job's id is a batch of the log (docs/design.md section 5): once its records are purged, only
# the log's index can say that the job committed, and a re-run of a committed job must write nothing.
# So the purge itself puts every committed job whose records it removes into the index first: no
# path that commits a job (a fresh commit, a roll-forward by recovery, abort() or a retried commit,
# an operator's resolution, a driver killed between its Committed record and anything after it) can
# then lose it. Index entries are facts that never change (a committed batch stays committed), so
# a purging call whose view of the log is stale still writes only true ones.


def job_state(state: BatchState, indexed: bool) -> BatchState:
    """A batch job's state: what the log shows, or COMMITTED if the job-id index names the job and
    the log (purged) shows no more than fences of it (NONE, or ABORTED: an Aborted record without
    intent after the commit). The index names only committed jobs, so it never overrides an open
    intent or a partly committed batch still in the log."""
    if indexed and state.status in (BatchStatus.NONE, BatchStatus.ABORTED):
        return replace(state, status=BatchStatus.COMMITTED)
    return state


def blocking_lease(lease: JobLease | None, job: str, now_ms: int) -> JobLease | None:
    """The run that refuses batch job `job` a start now: a live lease of another job of the family
    (docs/design.md section 5). A run of the same job takes the lease over instead: it writes the
    same job, and the log decides between two such runs (one commits, the other finds the job
    committed), as after a crash, whose re-run must not wait for the dead run's lease to end."""
    if lease is None or lease.job == job or not lease.live(now_ms):
        return None
    return lease


def left_by_a_run_of(lease: JobLease | None, job: str, run: str, now_ms: int) -> bool:
    """Whether a run of committed job `job` finds the family still held by another run of the
    same job: one that died (or is held up) after the job's `committed` record, before its
    release. Run `run` then takes the lease over and finishes what that one left (docs/design.md
    section 5), instead of leaving the family refused until the lease expires."""
    return lease is not None and lease.job == job and lease.run != run and lease.live(now_ms)


@dataclass(frozen=True)
class PurgePlan:
    below: int  # the new low-water mark
    to_index: tuple[BatchState, ...]  # committed batch jobs losing records: into the index first


def plan_purge(state: LogState, retain_batches: int, mark: int, *, jobs: bool) -> PurgePlan | None:
    """What a purge of a log whose low-water mark is `mark` does (None: nothing). For a log of
    batch jobs (`jobs`), every committed job with a record below the new mark goes into the index
    before the mark moves (a job whose first records were purged earlier is in it already)."""
    below = purge_below(state, retain_batches)
    if below is None or below <= mark:
        return None
    cut = tuple(sorted((b for b in state.batches.values()
                        if b.status is BatchStatus.COMMITTED and b.first_seq < below),
                       key=lambda b: b.first_seq)) if jobs else ()
    return PurgePlan(below, cut)


def purge_below(state: LogState, retain_batches: int) -> int | None:
    """The low-water mark that keeps every unfinished batch (and every batch whose source offsets
    have not moved) and the last `retain_batches` finished ones whole (a re-run of a recent batch
    must still find it committed), every stranded hold with the batches it names (a later check
    needs their handles), and the record of a job family's lease that no later record ended.
    A batch awaiting repair (aborted after its intent, its decided records lost) is kept however
    many batches follow: purged, its re-run would find nothing recorded and commit its own rows
    afresh instead of copying the decided ones (a batch job may be re-run weeks later). It holds
    the mark until it is repaired or an operator gives its records up (`twopc status` names it).
    None: nothing to purge."""
    if state.last_seq < 0:
        return None
    unfinished = [b.first_seq for b in state.batches.values()
                  if not b.finished or b.offsets_pending or b.awaits_repair]
    for hold in state.stranded.values():
        unfinished.append(hold.seq)
        unfinished += [state.batches[b].first_seq for b in hold.batches if b in state.batches]
    if state.lease is not None:  # held, or expired without an end: a later run's record ends it
        unfinished.append(state.lease.seq)
    finished = sorted((b for b in state.batches.values() if b.finished), key=lambda b: b.last_seq)
    kept = [b.first_seq for b in finished[-retain_batches:]] if retain_batches > 0 else []
    below = min([*unfinished, *kept, state.last_seq])
    return below if below > 0 else None



# ---- source offsets -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetsPlan:
    """Which batch's source offsets the group takes now (`batch`, `offsets`; None: none), and the
    batches whose offsets wait (`waiting`) behind the earliest batch not proven visible
    (`blocked_by`, with `why`)."""

    batch: str | None = None
    offsets: SourceOffsets | None = None
    intent_seq: int | None = None  # `batch`'s intent (the `offsets_committed` record names it)
    waiting: tuple[str, ...] = ()
    blocked_by: str | None = None
    why: str = ""


def plan_offsets(state: LogState) -> OffsetsPlan:
    """The group moves to the end offsets of the newest committed batch whose offsets have not
    moved, provided no batch intended before it is unproven: its intent open, partly visible,
    aborted after its intent (decided records lost), or held as a stranded commit (its markers
    not proven; protocol/holds.py). Offsets are end offsets: moving past such a batch would make a
    consumer failing over from the group skip the source records of output that is not visible.
    The caller runs this only after a full check of the markers in the same call (a batch not held
    then is proven visible: driver/call.py `move_source_offsets`)."""
    held = {b for hold in state.stranded.values() for b in hold.batches}
    newest: BatchState | None = None
    ordered = sorted((b for b in state.batches.values() if b.intent_seq is not None),
                     key=lambda b: b.intent_seq or 0)
    for i, b in enumerate(ordered):
        why = _unproven(b, b.batch in held)
        if why:
            waiting = tuple(x.batch for x in ordered[i:] if x.offsets_pending)
            if waiting:
                return OffsetsPlan(newest.batch if newest else None,
                                   newest.offsets if newest else None,
                                   newest.intent_seq if newest else None, waiting, b.batch, why)
            break
        if b.offsets_pending:
            newest = b
    if newest is None:
        return OffsetsPlan()
    return OffsetsPlan(newest.batch, newest.offsets, newest.intent_seq)


def _unproven(b: BatchState, held: bool) -> str:
    if held:
        return "a stranded commit: its markers are not proven (a later check releases it)"
    if b.status is BatchStatus.PREPARED:
        return "its intent has no outcome yet"
    if b.status is BatchStatus.PARTIAL:
        return "partly visible (its re-run or copy-forward repairs it)"
    if b.status is BatchStatus.ABORTED and b.lost:
        return "aborted after its intent: decided records lost (its re-run or copy-forward)"
    return ""
