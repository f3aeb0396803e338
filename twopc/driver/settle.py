"""Settling recorded intents without outcome (docs/design.md section 4), in two passes.

Pass 1 acts on what the coordinator proves: it names, in one record, the open transactions it will
roll forward and the ids of the source offsets' own transactions of batches without records (and,
when sweeping, in another, the pool's open transactions nothing recorded names), then commits the
first, fences the last, and does the offsets' transactions again (source_offsets.py). Pass 2 asks
the log itself about the rest, with a bounded wait that ends in "unknown" rather than a hang. Each
batch's outcome is then recorded. The decisions are in twopc/protocol; this module only asks and
carries out, through the call's door.

Every verdict belongs to one recorded handle (`txn_key`: transactional id, producer id, epoch):
two pending intents may name one transactional id with different epochs, and each gets its own.
Used by recovery (recovery.py) and by commit() and abort() for their own batch (coordinator.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from twopc.control import ControlClient, EndTxnOutcome, EndTxnRequest
from twopc.crashpoints import crash_point
from twopc.driver.call import DriverCall
from twopc.driver.recovery_report import BatchReport, HandleReport, RecoveryReport
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import Aborted, Committed, Orphans, Partial, RollForward
from twopc.protocol.offsets import CarrierAction, alone_id, carrier_action
from twopc.protocol.plans import unnamed_open
from twopc.protocol.state import BatchState, TxnKey, txn_key
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

_POLL_S = 0.2


def settle(call: DriverCall, batches: Sequence[BatchState], *, sweep: bool,
           name_orphans: bool = False, answered: Mapping[TxnKey, Verdict] | None = None,
           clock: Callable[[], float] = time.monotonic,
           on_progress: Callable[[int, int], None] | None = None) -> RecoveryReport:
    """Settle the open intents of `batches` and record each one's outcome.

    `answered` holds verdicts already known for some handles (a commit call's EndTxn answers):
    they skip pass 1. With `sweep`, pass 1 also fences the pool's unnamed open transactions. With
    `name_orphans` (a commit call settling its own batch), a `committed` record names the pool's
    open ids that no pending intent names (orphans: losing attempts), as a fresh commit's does: the
    report's `orphans`, for the caller to fence once the batch's markers are verified.
    `on_progress(settled, total)` is told how many handles have a final fate so far.
    """
    control, prefix = call.control, call.owner.prefix
    handles = [(b, h) for b in batches for h in b.intent]
    total = len(handles)

    def progress(settled: int) -> None:
        if on_progress is not None:
            on_progress(settled, total)

    progress(0)
    first: dict[TxnKey, Verdict] = dict(answered or {})
    to_describe = [h.transactional_id for _, h in handles if txn_key(h) not in first]
    described = control.describe_transactions(to_describe) if to_describe else {}
    for _, h in handles:
        if txn_key(h) not in first:
            first[txn_key(h)] = pass1(h, described.get(h.transactional_id))

    # A carrier of source offsets commits only once the rest of its batch is proven committed
    # (protocol/offsets.py `carrier_action`): it is held back here and decided after pass 2.
    # (Only intents written before issue 30 item 2 name one of their own transactions so.)
    carriers = {txn_key(h): b for b in batches for h in b.intent
                if b.offsets is not None and not b.offsets.deferred
                and h.transactional_id == b.offsets.carrier}
    # At most one handle per id holds the coordinator's producer id and epoch: EndTxn each once.
    roll = list({txn_key(h): h for _, h in handles
                 if first[txn_key(h)].fate is Fate.ROLL_FORWARD
                 and txn_key(h) not in carriers}.values())
    held_carriers = [h for _, h in handles if txn_key(h) in carriers
                     and first[txn_key(h)].fate is Fate.ROLL_FORWARD]
    # Batches without records, intents written before issue 30 item 2: their source offsets' own
    # transaction is done again on the id the intent names (an intent written before those
    # transactions names none: one is chosen). Deferred offsets move after the outcome, once
    # proven (call.py `move_source_offsets`), as every batch's since.
    alone = {b.batch: b.offsets.with_carrier(b.offsets.carrier or alone_id(prefix))
             for b in batches
             if not b.intent and b.offsets is not None and not b.offsets.deferred}
    rolled = (*(h.transactional_id for h in roll), *(str(o.carrier) for o in alone.values()))
    orphans: tuple[str, ...] = ()
    if sweep:
        listed = call.start_open_ids()()  # the whole pool: any partition and slot
        # Never an open transaction this settling may still commit: those rolled forward, the
        # carriers held back until pass 2 decides them, and held ids (a held id's open
        # transaction may be our release, cut short: call.py).
        orphans = unnamed_open(prefix, listed,
                               protected=set(rolled)
                               | {h.transactional_id for h in held_carriers}
                               | set(call.state.stranded))
    if rolled:
        call.append(RollForward(tuple(dict.fromkeys(rolled))))
    if orphans:
        call.append(Orphans(orphans))
    crash_point("recovery.after_record")

    fates = dict(first)
    for h in held_carriers:
        fates[txn_key(h)] = Verdict(Fate.UNDECIDED, "a carrier of source offsets, held back")
    if roll:
        answers = _commit_all(call, roll)
        for h in roll:
            fates[txn_key(h)] = fate_of_end_txn(answers.get(h.transactional_id))
        crash_point("recovery.after_rollforward")
    report = RecoveryReport(rolled_forward=tuple(h.transactional_id for h in roll))
    if orphans:
        failed = call.fence_named(orphans)
        report.orphans_fenced = tuple(t for t in orphans if t not in failed)
        report.fence_failures = failed
        crash_point("recovery.during_sweep")

    held = {txn_key(h) for h in held_carriers}
    undecided = [h for _, h in handles
                 if fates[txn_key(h)].fate is Fate.UNDECIDED and txn_key(h) not in held]
    progress(total - len(undecided) - len(held))
    fates.update(check_logs(control, undecided, call.settings.settle_wait_ms, clock,
                            on_settled=lambda n: progress(total - len(undecided) - len(held) + n)))
    to_fence = _decide_carriers(call, held_carriers, carriers, fates)
    progress(total)

    for b in batches:
        if b.batch in alone:
            call.commit_offsets_alone(b.batch, alone[b.batch])
        open_orphans = partial(_open_orphans, call, b) if name_orphans else None
        report.batches.append(_record_outcome(call, b, first, fates, open_orphans))
        crash_point("recovery.after_outcome")
    # Carriers the outcome records name as lost: fenced now, so the offsets they hold never land
    # (a crash before this leaves them to the next sweep: no pending intent names them then).
    # Only a carrier that an outcome record names: an undecided batch has none (the door would
    # refuse the fence), and its carrier stays open for the next settling to decide again.
    recorded = {r.batch for r in report.batches if r.recorded_seq is not None}
    fence_now = [h.transactional_id for h in to_fence if carriers[txn_key(h)].batch in recorded]
    if fence_now:
        failed = call.fence_named(fence_now)
        report.fence_failures.update(failed)
    return report


def _decide_carriers(call: DriverCall, held: Sequence[Handle],
                     carriers: Mapping[TxnKey, BatchState],
                     fates: dict[TxnKey, Verdict]) -> list[Handle]:
    """Commit each held-back carrier whose batch's other transactions are all proven committed
    (after a record naming it); mark for fencing those whose batch lost one; leave the rest open
    and undecided. Returns the carriers to fence once the outcome records name them."""
    commit: list[Handle] = []
    fence: list[Handle] = []
    for h in held:
        b = carriers[txn_key(h)]
        others = [fates[txn_key(o)].fate for o in b.intent if txn_key(o) != txn_key(h)]
        action = carrier_action(others)
        if action is CarrierAction.COMMIT:
            commit.append(h)
        elif action is CarrierAction.FENCE:
            fence.append(h)
            fates[txn_key(h)] = Verdict(Fate.ABORTED, "a carrier of source offsets, fenced: "
                                        "another transaction of its batch was aborted")
        else:
            fates[txn_key(h)] = Verdict(Fate.UNKNOWN, "a carrier of source offsets, left open: "
                                        "the batch's other transactions are not all proven")
    if commit:
        call.append(RollForward(tuple(h.transactional_id for h in commit)))
        answers = _commit_all(call, commit)
        for h in commit:
            fates[txn_key(h)] = fate_of_end_txn(answers.get(h.transactional_id))
        crash_point("recovery.after_carriers")
        unconfirmed = [h for h in commit if fates[txn_key(h)].fate is Fate.UNDECIDED]
        fates.update(check_logs(call.control, unconfirmed, call.settings.settle_wait_ms))
    return fence


def _open_orphans(call: DriverCall, b: BatchState) -> tuple[str, ...]:
    # As the fresh commit: open ids of the pool that no pending intent (this one included) names.
    return call.open_orphans({h.transactional_id for h in b.intent})


def _commit_all(call: DriverCall, handles: Sequence[Handle]) -> dict[str, EndTxnOutcome]:
    if not handles:
        return {}
    return call.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)
                          for h in handles])


def check_logs(control: ControlClient, handles: Sequence[Handle], wait_ms: int,
               clock: Callable[[], float] = time.monotonic,
               on_settled: Callable[[int], None] | None = None) -> dict[TxnKey, Verdict]:
    """Pass 2: the log check for each handle, waiting (bounded) while a partition is not stable.
    `on_settled(n)` is told how many of `handles` have a final verdict so far."""
    deadline = clock() + wait_ms / 1000
    out: dict[TxnKey, Verdict] = {}
    todo = list(handles)
    while todo:
        waiting: list[Handle] = []
        for h in todo:
            verdicts: list[Verdict] = []
            for span in h.spans:
                v = fate_of_log_check(control.log_check(span.topic, span.partition,
                                                        span.first_offset, h.producer_id, h.epoch,
                                                        span.topic_id))
                verdicts.append(v)
                if v.fate in (Fate.COMMITTED, Fate.ABORTED):
                    break
            v = combine_spans(verdicts)
            out[txn_key(h)] = v
            if v.fate is Fate.WAIT:
                waiting.append(h)
        todo = waiting
        if on_settled is not None:
            on_settled(len(handles) - len(todo))
        if todo and clock() >= deadline:
            for h in todo:
                out[txn_key(h)] = Verdict(
                    Fate.UNKNOWN, f"not stable after {wait_ms} ms ({out[txn_key(h)].reason})")
            if on_settled is not None:
                on_settled(len(handles))
            break
        if todo:
            time.sleep(_POLL_S)
    return out


def _record_outcome(call: DriverCall, b: BatchState, first: Mapping[TxnKey, Verdict],
                    fates: Mapping[TxnKey, Verdict],
                    open_orphans: Callable[[], tuple[str, ...]] | None) -> BatchReport:
    # Within one intent the transactional ids differ (one per Spark partition).
    mine = {h.transactional_id: fates[txn_key(h)] for h in b.intent}
    outcome = batch_outcome(mine)
    assert b.intent_seq is not None
    seq: int | None = None
    orphans: tuple[str, ...] = ()
    if outcome is BatchOutcome.COMMITTED:
        orphans = open_orphans() if open_orphans is not None else ()
        seq = call.append(Committed(b.batch, b.intent_seq, orphans))
    elif outcome is BatchOutcome.ABORTED:
        reasons = sorted({v.reason for v in mine.values()})
        seq = call.append(Aborted(b.batch, b.intent, "; ".join(reasons)[:500], b.intent_seq))
    elif outcome is BatchOutcome.PARTIAL:
        won = tuple(t for t, v in mine.items() if v.fate is Fate.COMMITTED)
        lost = tuple(t for t, v in mine.items() if v.fate is Fate.ABORTED)
        seq = call.append(Partial(b.batch, b.intent_seq, won, lost))
    rows = tuple(
        HandleReport(b.batch, h.transactional_id, h.task_partition, h.record_count,
                     first[txn_key(h)].fate, _outcome_of(mine[h.transactional_id]),
                     mine[h.transactional_id].reason)
        for h in b.intent)
    return BatchReport(b.batch, outcome, rows, seq, orphans)


def _outcome_of(v: Verdict) -> Fate:
    return v.fate if v.fate in (Fate.COMMITTED, Fate.ABORTED) else Fate.UNKNOWN
