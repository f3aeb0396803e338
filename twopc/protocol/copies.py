"""Copy-forward: repairing a batch from Kafka's own copy of its aborted records. Pure.

    a batch left partial or aborted + the re-run ──plan_copy──> the handles to copy, the re-run's
                                                                 duplicates (or nothing to copy)
    what the log held of a lost handle ──verify_copy──> verified, or why not
    the policy + the verifications ──decide_repair──> copy / re-run / the loud error

A batch whose intent was recorded (the decision to commit) but whose transactions the broker
aborted (the driver down past `transaction.timeout.ms`, Flink's loss case) is `partial` or
`aborted` in the log; `BatchState.lost` names the decided handles that did not become visible.
Their records stay in the partition log until retention, and the handle says exactly what they
were (producer id and epoch, first offset and count per partition, the order-insensitive
checksum). Read back and verified, they are committed again in a new transaction of the batch: the
batch then holds what was decided, whatever a re-run of a non-deterministic source produces, and
every transaction of the re-run is a duplicate. docs/design.md section 4.

Design: docs/design.md section 4.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint.redact import redacted_repr
from twopc.control import Ending, ReadProblem, SpanRecords
from twopc.protocol.enums import TextEnum
from twopc.protocol.handle import Handle
from twopc.protocol.state import BatchState, BatchStatus


class RepairPolicy(TextEnum):
    """What repairs a batch whose decided transactions were aborted (`twopc.repairPolicy`)."""

    AUTO = "auto"  # copy when the log's records verify, else the re-run repair (the default)
    COPY = "copy"  # copy when they verify, else the loud error: never the re-run's rows
    RERUN = "rerun"  # the re-run repair only (as before copy-forward)


def parse_policy(text: str) -> RepairPolicy:
    try:
        return RepairPolicy(text.strip().lower())
    except ValueError:
        raise ValueError(f"repair policy {text!r:.40}: one of "
                         f"{', '.join(p.value for p in RepairPolicy)}") from None


@dataclass(frozen=True)
class CopyPlan:
    """Copy `sources` (one per Spark partition not visible) into new transactions of the batch;
    every transaction of the re-run (`duplicates`) is then a duplicate."""

    batch: str
    sources: tuple[Handle, ...]
    duplicates: tuple[Handle, ...]


def plan_copy(state: BatchState, rerun: Sequence[Handle], policy: RepairPolicy) -> CopyPlan | None:
    """The copy to try for a batch left partial or aborted after its intent; None when there is
    none to try (the policy says re-run, or nothing decided was lost: a batch aborted before its
    intent, or resolved by an operator)."""
    if policy is RepairPolicy.RERUN or not state.lost:
        return None
    if state.status not in (BatchStatus.PARTIAL, BatchStatus.ABORTED):
        return None
    sources = tuple(h for _, h in sorted(state.lost.items()))
    return CopyPlan(state.batch, sources, tuple(rerun))


def rerun_replaces_lost(state: BatchState, rerun: Sequence[Handle], policy: RepairPolicy) -> bool:
    """Would the re-run repair of a partly visible batch commit other records than were decided
    for a lost partition? True when the re-run has no transaction for a lost Spark partition, or
    one whose count or checksum differs from the lost handle's (a non-deterministic source, a
    rewritten file): then only a copy keeps what was decided. Under `copy` always (when anything
    was lost): that policy never takes the re-run's rows."""
    if policy is RepairPolicy.RERUN or not state.lost:
        return False
    if policy is RepairPolicy.COPY:
        return True
    again = {h.task_partition: h for h in rerun}
    return any(p not in again or (again[p].record_count, again[p].checksum)
               != (h.record_count, h.checksum) for p, h in state.lost.items())


# What may verify a moment later: a fetch that failed (a leader away, retries spent), a marker not
# yet written (pass 1 takes PrepareAbort as aborted before the markers land), an id held for now.
TRANSIENT_PROBLEMS: frozenset[ReadProblem] = frozenset({ReadProblem.FETCH_ERROR,
                                                        ReadProblem.NO_MARKER})


@dataclass(frozen=True)
class CopyCheck:
    """Whether what the log holds of `handle` is exactly what it wrote; `problems` say why not.
    `transient`: some problem may pass on a later try (TRANSIENT_PROBLEMS, an id in use)."""

    handle: Handle
    problems: tuple[str, ...] = ()
    transient: bool = False

    @property
    def verified(self) -> bool:
        return not self.problems


def verify_copy(handle: Handle, reads: Sequence[SpanRecords], checksum: str | None) -> CopyCheck:
    """Compare what was read back of `handle` (one read per span) with the handle: every span read
    whole to an abort marker, each span's count, the total count, and `checksum` (of all records
    read, computed as the writer does; None when not computed) against the handle's."""
    problems: list[str] = []
    transient = False
    by_span: Mapping[tuple[str, int, int], SpanRecords] = {
        (r.topic, r.partition, r.first_offset): r for r in reads}
    total = 0
    for span in handle.spans:
        where = f"{span.topic}[{span.partition}]@{span.first_offset}"
        read = by_span.get((span.topic, span.partition, span.first_offset))
        if read is None:
            problems.append(f"{where}: not read")
            continue
        if read.problem is not None:
            problems.append(read.describe())
            transient = transient or read.problem in TRANSIENT_PROBLEMS
            continue
        if read.ending is not Ending.ABORTED:
            problems.append(f"{where}: the transaction ended "
                            f"{read.ending.value if read.ending else 'without marker'}, not aborted")
        if len(read.records) != span.record_count:
            problems.append(f"{where}: {len(read.records)} records in the log, the handle counts "
                            f"{span.record_count}")
        total += len(read.records)
    if not problems:
        if total != handle.record_count:
            problems.append(f"{total} records in the log, the handle counts {handle.record_count}")
        elif checksum != handle.checksum:
            problems.append(f"the records' checksum {checksum} is not the handle's "
                            f"{handle.checksum}")
    return CopyCheck(handle, tuple(problems), transient)


class RepairAction(TextEnum):
    COPY = "copy"  # commit the log's copy; the re-run's transactions are duplicates
    RERUN = "rerun"  # the re-run repair (a partial batch) or a fresh commit (an aborted one)
    FAIL = "fail"  # the loud error, naming why the copy cannot be made


@dataclass(frozen=True)
class RepairDecision:
    action: RepairAction
    reasons: tuple[str, ...] = ()  # why not copied (for a re-run: a warning; for FAIL: the error)


def decide_repair(policy: RepairPolicy, checks: Sequence[CopyCheck]) -> RepairDecision:
    """Copy only when every lost handle verifies (a batch is copied whole or not at all: a half
    copy and a half re-run could hold a row twice or not at all). Under `auto` the re-run repair
    takes over only when the records are proven unusable (gone, other records): a problem that
    may pass later fails the attempt instead, so that a momentary fetch error never puts a
    re-run's rows in place of what was decided; the next attempt reads again."""
    if policy is RepairPolicy.RERUN:
        return RepairDecision(RepairAction.RERUN)
    reasons = tuple(f"{c.handle.transactional_id} (Spark partition {c.handle.task_partition}): "
                    f"{p}" for c in checks for p in c.problems)
    if not checks:
        reasons = ("nothing to copy",)
    if not reasons:
        return RepairDecision(RepairAction.COPY)
    if policy is RepairPolicy.COPY or any(c.transient for c in checks):
        return RepairDecision(RepairAction.FAIL, reasons)
    return RepairDecision(RepairAction.RERUN, reasons)


@dataclass(frozen=True)
class RepairSettings:
    """What a driver needs to copy forward: the policy, and the producer settings (the sink's
    `kafka.*` options) and transaction timeout of the copy's transactions. Without producer
    settings nothing can be copied: the policy then decides as for records that do not verify."""

    policy: RepairPolicy = RepairPolicy.AUTO
    producer_config: Mapping[str, Any] | None = None
    transaction_timeout_ms: int = 60000

    def __repr__(self) -> str:
        # The producer settings hold the sink's secrets (sasl.password, ssl.key.password, ...).
        return redacted_repr(self)
