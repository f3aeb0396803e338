"""Recovery before any new write, and the operator's resolution of a stuck batch (docs/design.md
section 4).

`recover()` settles every recorded intent without outcome (settle.py: pass 1, what the coordinator
proves; pass 2, what the log proves), fences the pool's open transactions that no record names,
checks and releases stranded commits (stranded.py), and purges. It runs on the driver before a
query, micro-batch or job writes (spark/driver.py `prepare`), after Spark's abort, and from
`twopc recover`. `resolve()` records an operator's decision for a batch recovery cannot settle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from checkpoint import KeyExists, Log
from twopc.control import ControlClient
from twopc.driver import observe
from twopc.driver.call import DriverCall, DriverSettings
from twopc.driver.recovery_report import RecoveryReport
from twopc.driver.settle import settle
from twopc.driver.stranded import StrandedReport, prove_holds
from twopc.errors import ResolutionRefused
from twopc.protocol.holds import HoldProof, acknowledged_in, loss_acknowledgment, loss_entry_key
from twopc.protocol.log_records import (
    DECISIONS,
    RESOLVE_ABORTED,
    RESOLVE_COMMITTED,
    Orphans,
    Resolved,
    Stranded,
)
from twopc.protocol.offsets import SourceOffsetsError, own_transaction
from twopc.protocol.owner import Owner
from twopc.protocol.state import BatchState, BatchStatus, txn_key
from twopc.protocol.verdicts import BatchOutcome, Fate

log = logging.getLogger("twopc.driver")


def _close_offsets_transaction(call: DriverCall, settled: Sequence[BatchState]) -> None:
    """An intent recovery settled may have left its offsets' own transaction open (begun before
    the intent, the driver died): the sweep spared it while the intent was pending. If nothing
    moves now, it is fenced (after a record naming it), so the group's offsets are not held
    pending until its timeout; a later move begins a new one."""
    ids = sorted({t for b in settled for t in own_transaction(b.offsets, bool(b.intent))})
    if ids:
        call.append(Orphans(tuple(ids)))
        call.fence_named(ids)


def check_resolution(state: BatchState, decision: str) -> None:
    """ResolutionRefused unless `decision` may be recorded for the batch: one left prepared
    (undecided) or partial takes either; one awaiting repair (aborted after its intent, nothing
    visible) only "aborted"; any other none. (`twopc recover` asks before it confirms.)"""
    if state.awaits_repair and decision != RESOLVE_ABORTED:
        raise ResolutionRefused(
            f"batch {state.batch} was aborted after its intent and nothing of it is visible: "
            "resolve it aborted (its decided records are given up, a re-run writes afresh), "
            "or copy them forward (`twopc recover --repair copy`, or re-run the batch)")
    if not (state.awaits_repair or state.status in (BatchStatus.PREPARED, BatchStatus.PARTIAL)):
        raise ResolutionRefused(
            f"batch {state.batch} is {state.status.value}: only a batch left prepared "
            "(undecided), partial, or aborted with its decided records awaiting repair needs a "
            "resolution")


class Recovery:
    """recover() and resolve() of one owner's log; every call opens its own `DriverCall`."""

    def __init__(self, log: Log, control: ControlClient, settings: DriverSettings) -> None:
        self.log = log
        self.control = control
        self.settings = settings

    @property
    def owner(self) -> Owner:
        return self.settings.owner

    def recover(self, on_progress: Callable[[int, int], None] | None = None,
                first_look: bool = True) -> RecoveryReport:
        """Settle every recorded intent without outcome and fence the pool's unnamed open
        transactions. Run before any new writes; idempotent. UndecidedError if an outcome cannot
        be proven (nothing is guessed); a partly committed batch is left for its re-run.
        `first_look` False: no first look at the newest committed batch (call.py
        `_to_prove`), for a process that never commits and runs this before every
        micro-batch (the streaming writer's planning): the committing process looks.
        `on_progress(settled, total)` follows the transactions being settled."""
        began = time.monotonic()
        call = DriverCall(self.log, self.control, self.settings, first_look=first_look)
        pending = call.state.pending
        # Stranded commits first (the sweep's fences would do it too; this report keeps it).
        early = call.release_stranded()
        report = settle(call, pending, sweep=True, on_progress=on_progress)
        intents = {b.batch: b.intent for b in pending}
        for b in report.batches:
            if b.outcome is BatchOutcome.COMMITTED:
                call.remember_job(b.batch, b.recorded_seq)
            observe.log_batch(observe.figures(
                "recovery", b.batch, b.outcome.value, intents.get(b.batch, ()),
                committed=sum(h.outcome is Fate.COMMITTED for h in b.handles),
                now_ms=self.settings.clock_ms(), latency_ms=(time.monotonic() - began) * 1000))
        # Partly committed ones too: the report names their committed partitions, and what it
        # names committed is proven first (call.py `_to_prove`).
        settled = {b.batch for b in report.batches
                   if b.outcome in (BatchOutcome.COMMITTED, BatchOutcome.PARTIAL)}
        # (The held ids were just checked, and retried if they could be released.)
        # Patient for exactly the batches it checks (as for all): their markers, just sent, are
        # on their way, so their partitions get the longer window (holds.marker_window_s).
        late = call.release_stranded(only=settled, recheck_held=False, patient=settled) if settled \
            else StrandedReport()
        report.stranded = early.merged(late)
        try:
            plan = call.move_source_offsets()
        except SourceOffsetsError as exc:
            # Reported, not raised: a query must still start (its next commit tries again, and
            # one started without twopc.commitSourceOffsets runs on); the group lags meanwhile.
            log.error("twopc: %s", exc)
            report.offsets_waiting = f"source offsets not moved: {exc}"[:2000]
        else:
            if plan.batch is None:
                _close_offsets_transaction(call, pending)
            report.offsets_moved_to = plan.batch
            if plan.waiting:
                report.offsets_waiting = (f"source offsets of batches {', '.join(plan.waiting)} "
                                          f"wait: batch {plan.blocked_by} is {plan.why}")
        call.purge()
        report.raise_if_incomplete()
        return report

    def resolve(self, batch: str, decision: str, note: str) -> None:
        """The operator's explicit decision for a stuck batch, recorded.

        "committed": keep what is visible, the re-run writes nothing more (a lost part stays
        lost). "aborted": the batch counts as not committed, the re-run writes all of it again
        (a visible part appears twice). Run recover() first: it settles what can be proven.
        A batch awaiting repair (aborted after its intent, nothing visible) takes "aborted"
        only: its decided records are given up, its re-run writes afresh, and the purge may
        take it (protocol/plans.py `purge_below`).
        """
        if decision not in DECISIONS:
            raise ResolutionRefused(f"decision must be one of {DECISIONS}, got {decision!r}")
        if not note.strip():
            raise ResolutionRefused("a resolution needs a note saying who decided and why")
        call = DriverCall(self.log, self.control, self.settings)
        check_resolution(call.state.batch(batch), decision)
        seq = call.append(Resolved(batch, decision, note))
        if decision == RESOLVE_COMMITTED:
            call.remember_job(batch, seq)

    def look_at(self, batch: str) -> None:
        """Before a re-run of committed job `batch` reports it committed: the first look at its
        records, reading only (DriverCall.look_at). StrandedCommitAborted if the log proves
        any aborted."""
        DriverCall(self.log, self.control, self.settings).look_at(batch)

    def acknowledge_loss(self, batch: str, note: str) -> tuple[str, ...]:
        """The operator's acknowledgement of committed records of `batch` that the log proves
        aborted after their commit (StrandedCommitAborted): the holds of its ids go, so that
        checks stop raising, and the acknowledgement (transactions, note, time) stays in the
        log's index, which is never purged. Refused unless the log proves a loss not
        acknowledged yet. Returns the ids of the transactions it acknowledges."""
        if not note.strip():
            raise ResolutionRefused("an acknowledgement needs a note saying who decided and why")
        call = DriverCall(self.log, self.control, self.settings)
        # Every visible handle of the batch, held or not: a re-run of a committed job proves a
        # loss without recording a hold (DriverCall.look_at), and the log proves it either way.
        handles = [(batch, h) for _, h in sorted(call.batch_state(batch).committed.items())]
        evidence = prove_holds(self.control, handles)
        if evidence.retry:
            # All of what the log shows lost at once, or none: a span not answered yet may be
            # aborted too, and would be raised again at once.
            raise ResolutionRefused(
                f"the log cannot answer yet for some of batch {batch}'s records ("
                + "; ".join(sorted(evidence.retry.values())) + "): ask again once every "
                "partition's leader answers")
        proofs = evidence.proofs
        lost = tuple(sorted(t for t, (p, _) in proofs.items() if p is HoldProof.ABORTED))
        if not lost:
            raise ResolutionRefused(
                f"batch {batch} has no committed records the log proves aborted (its ids: "
                f"{sorted({h.transactional_id for _, h in handles}) or 'none'}): nothing to "
                "acknowledge; "
                "`twopc recover` clears a hold once the log proves its records committed")
        # Entries are made once each: a loss found after one was acknowledged (a repair's
        # transaction aborted from outside) gets the next one. Another operator may be making it
        # at the same moment: then read again.
        for _ in range(8):
            entries = call.loss_acknowledgments(batch)
            visible = [txn_key(h) for _, h in handles]
            new = sorted(set(evidence.aborted).difference(
                *(acknowledged_in(e, visible) for e in entries)))
            if not new:
                raise ResolutionRefused(f"the loss of batch {batch} was acknowledged already "
                                        f"({entries[-1] if entries else ''})")
            new_ids = {k[0] for k in new}
            record = loss_acknowledgment(new, note, self.settings.clock_ms(),
                                         {t: proofs[t][1] for t in lost if t in new_ids})
            try:
                self.log.index.create(loss_entry_key(batch, len(entries) + 1), record)
                break
            except KeyExists:
                continue
        else:
            raise ResolutionRefused(f"batch {batch}: other acknowledgements kept being made "
                                    "while this one was; ask again")
        # Only this batch's holds: an id reused by another batch and held for it (its release
        # cut short, say) stays held, or its own committed records would be lost.
        held = tuple(t for t in lost if t in call.state.stranded
                     and set(call.state.stranded[t].batches) <= {batch})
        if held:
            call.append(Stranded((), held))
        return tuple(sorted(new_ids))
