"""What the demo says about the twopc log: pure functions from folded log state and records to
sentences and figures (no I/O), so that the narration is tested without Spark or Kafka.

After the kill, the log shows the batch whose intent has no outcome; after the restart, the records
appended since the kill are what recovery did (docs/design.md section 4): RollForward names the
transactions it committed, Orphans those it fenced, and an outcome record closes each batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from twopc.protocol.log_records import Aborted, Committed, LogRecord, Orphans, Partial, Resolved, RollForward
from twopc.protocol.state import BatchState


@dataclass(frozen=True)
class BatchFigures:
    batch: str
    records: int
    transactions: int


def committed_figures(state: BatchState) -> BatchFigures:
    """Records and transactions of a committed batch (its visible handles)."""
    handles = list(state.committed.values())
    return BatchFigures(state.batch, sum(h.record_count for h in handles), len(handles))


def intent_figures(state: BatchState) -> BatchFigures:
    return BatchFigures(state.batch, sum(h.record_count for h in state.intent), len(state.intent))


@dataclass(frozen=True)
class RecoveredBatch:
    batch: str
    outcome: str  # committed / aborted / partial / resolved:<decision> / undecided
    transactions: int  # in the intent
    records: int
    rolled_forward: int  # committed by recovery's EndTxn
    finished_before: int  # already committed (or aborted) on the broker when recovery looked


@dataclass
class RecoverySummary:
    batches: list[RecoveredBatch] = field(default_factory=list)
    orphans_fenced: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"batches": [asdict(b) for b in self.batches], "orphans_fenced": self.orphans_fenced}

    def lines(self) -> list[str]:
        out = []
        for b in self.batches:
            if b.outcome == "committed":
                done = (f" ({b.finished_before} already committed before the kill)"
                        if b.finished_before else "")
                out.append(f"recovery rolled forward batch {b.batch}: {b.rolled_forward} of "
                           f"{b.transactions} transactions{done}; batch {b.batch} committed "
                           f"({b.records} records)")
            else:
                out.append(f"recovery settled batch {b.batch}: {b.outcome} ({b.rolled_forward} of "
                           f"{b.transactions} transactions rolled forward)")
        if self.orphans_fenced:
            out.append(f"recovery fenced {self.orphans_fenced} open transactions that no record names")
        if not out:
            out.append("recovery found nothing to do")
        return out


def summarize_recovery(pending: Sequence[BatchState],
                       since_kill: Sequence[tuple[int, LogRecord]]) -> RecoverySummary:
    """What recovery did to the batches `pending` at the kill, from the records appended since."""
    rolled: set[str] = set()
    outcomes: dict[str, str] = {}
    summary = RecoverySummary()
    for _, rec in since_kill:
        if isinstance(rec, RollForward):
            rolled.update(rec.ids)
        elif isinstance(rec, Orphans):
            summary.orphans_fenced += len(rec.ids)
        elif isinstance(rec, Committed | Partial) and rec.batch not in outcomes:
            outcomes[rec.batch] = "committed" if isinstance(rec, Committed) else "partial"
        elif isinstance(rec, Aborted) and rec.intent_seq is not None and rec.batch not in outcomes:
            outcomes[rec.batch] = "aborted"
        elif isinstance(rec, Resolved) and rec.batch not in outcomes:
            outcomes[rec.batch] = f"resolved:{rec.decision}"
    for state in pending:
        ids = {h.transactional_id for h in state.intent}
        n_rolled = len(ids & rolled)
        summary.batches.append(RecoveredBatch(
            state.batch, outcomes.get(state.batch, "undecided"), len(ids),
            sum(h.record_count for h in state.intent), n_rolled, len(ids) - n_rolled))
    return summary
