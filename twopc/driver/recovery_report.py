"""What a recovery (or a commit call settling its own batch) found and did, per batch and handle:
the report behind `twopc recover`, the Spark listener's recovery entries and the typed errors.

Design: docs/design.md section 4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twopc.driver.stranded import StrandedReport
from twopc.errors import FenceFailed, StrandedUnreleased, UndecidedError
from twopc.protocol.verdicts import BatchOutcome, Fate


@dataclass(frozen=True)
class HandleReport:
    batch: str
    transactional_id: str
    task_partition: int
    record_count: int
    pass1: Fate  # what the coordinator said (or the EndTxn answer, in a commit call)
    outcome: Fate  # COMMITTED, ABORTED or UNKNOWN
    reason: str = ""


@dataclass(frozen=True)
class BatchReport:
    batch: str
    outcome: BatchOutcome
    handles: tuple[HandleReport, ...]
    recorded_seq: int | None  # the outcome record, None if undecided
    orphans: tuple[str, ...] = ()  # open ids its `committed` record names, for the caller to fence

    @property
    def committed_partitions(self) -> list[int]:
        return sorted(h.task_partition for h in self.handles if h.outcome is Fate.COMMITTED)

    @property
    def lost_partitions(self) -> list[int]:
        return sorted(h.task_partition for h in self.handles if h.outcome is Fate.ABORTED)


@dataclass
class RecoveryReport:
    batches: list[BatchReport] = field(default_factory=list)
    rolled_forward: tuple[str, ...] = ()
    orphans_fenced: tuple[str, ...] = ()
    # Orphans the sweep named and could not fence: transactional id -> the broker's answer.
    fence_failures: dict[str, str] = field(default_factory=dict)
    # Committed transactions whose markers the broker dropped (stranded.py): Recovery.recover().
    stranded: StrandedReport = field(default_factory=StrandedReport)
    # Source offsets (twopc.commitSourceOffsets): the batch whose end offsets the group took, and
    # why later batches' wait, if they do (call.py `move_source_offsets`).
    offsets_moved_to: str | None = None
    offsets_waiting: str = ""

    @property
    def undecided(self) -> list[BatchReport]:
        return [b for b in self.batches if b.outcome is BatchOutcome.UNDECIDED]

    def raise_if_undecided(self) -> None:
        for b in self.undecided:
            raise UndecidedError(b.batch, {h.transactional_id: h.reason for h in b.handles
                                           if h.outcome not in (Fate.COMMITTED, Fate.ABORTED)}, self)

    def raise_if_incomplete(self) -> None:
        """Recovery's own call fails unless everything it found is settled: an undecided batch,
        a committed transaction still holding partitions open, an orphan it could not fence."""
        self.raise_if_undecided()
        if self.stranded.unreleased:
            raise StrandedUnreleased(self.stranded.summary(), self)
        if self.fence_failures:
            raise FenceFailed(None, self.fence_failures, "recovery recorded what it settled", self)

    def summary(self) -> str:
        parts = [f"batch {b.batch}: {b.outcome.value}" for b in self.batches]
        if self.rolled_forward:
            parts.append(f"rolled forward {len(self.rolled_forward)}")
        if self.orphans_fenced:
            parts.append(f"fenced {len(self.orphans_fenced)} orphans")
        if self.fence_failures:
            parts.append("could not fence " + ", ".join(
                f"{t} ({why})" for t, why in sorted(self.fence_failures.items())))
        if self.stranded.summary():
            parts.append(self.stranded.summary())
        if self.offsets_moved_to is not None:
            parts.append(f"source offsets moved to batch {self.offsets_moved_to}'s end")
        if self.offsets_waiting:
            parts.append(self.offsets_waiting)
        return "; ".join(parts) or "nothing to recover"
