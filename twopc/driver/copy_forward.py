"""Copy-forward: a batch whose decided transactions the broker aborted, repaired from Kafka's own
copy of their records (docs/design.md section 4; the decisions in protocol/copies.py).

    read back (control client, read_uncommitted) ─> verify against the handles ─> policy:
      copy:  `duplicates` record + fence of the re-run's transactions
             `copying` record naming the copy's ids and the sources
             a transactional producer per source, in this process, re-produces key, value, headers,
             partition and timestamp of every record, and pre-commits (the writer's own steps)
             the copies' handles must match their sources (count and checksum)
             -> the caller commits them under the usual intent: `prepared`, EndTxn, `committed`
      re-run: the caller's repair as before (with the reasons, logged)
      fail:   CopyForwardFailed naming why

Crash safety comes from the records: before the `copying` record nothing was sent; a crash after it
leaves at most open transactions that no intent names (the next recovery's sweep, or the next
commit's `committed` record, fences them as orphans) and the batch as it was, so the next call copies
again; once the copies' intent is recorded they are rolled forward like any intent, and once the
batch is committed nothing copies it again (the log says committed).

The copy's transactional id is the source's own (`{prefix}-{p}-{slot}`, resolved: its transaction
was aborted and recorded), unless a stranded commit holds it. The copy is written with the
executor's writer (`write_partition`): the one place where the driver builds on the executor, so
that a copy is produced, checked and identified exactly as a task's transaction is.

Design: docs/design.md section 4.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from twopc.control import SpanRecords
from twopc.crashpoints import crash_point
from twopc.driver.call import DriverCall
from twopc.errors import CopyForwardFailed
from twopc.protocol.copies import (
    CopyCheck,
    CopyPlan,
    RepairAction,
    RepairDecision,
    RepairSettings,
    decide_repair,
    verify_copy,
)
from twopc.protocol.handle import Handle
from twopc.protocol.log_records import Copying, Duplicates
from twopc.protocol.state import txn_key

log = logging.getLogger("twopc")
PARALLEL = int(os.environ.get("TWOPC_COPY_PARALLEL", "8"))  # sources read, copies written at once


@dataclass(frozen=True)
class CopyOutcome:
    """What a copy attempt came to: the copies' handles to commit (action COPY), or the decision
    and its reasons (RERUN: the caller repairs as before)."""

    decision: RepairDecision
    copies: tuple[Handle, ...] = ()
    duplicates: tuple[str, ...] = ()  # the re-run's transactions, fenced
    records: int = 0
    read_s: float = 0.0  # reading back and verifying
    write_s: float = 0.0  # writing the copies (pre-committed)


def read_back(call: DriverCall, source: Handle) -> tuple[list[SpanRecords], str | None]:
    """Every span of `source` read back from the log, and the checksum of all its records as the
    writer computes it (None when a span could not be read whole or a record has no value)."""
    reads = [call.control.read_transaction(s.topic, s.partition, s.first_offset,
                                           source.producer_id, source.epoch, s.topic_id,
                                           s.record_count)
             for s in source.spans]
    if any(r.problem is not None for r in reads):
        return reads, None
    rows = [(r.topic, rec.key, rec.value, rec.headers) for r in reads for rec in r.records]
    if any(value is None for _, _, value, _ in rows):
        return reads, None  # twopc writes no null values: not this transaction's records
    from twopc.executor.checksum import checksum_of

    return reads, checksum_of(rows)  # type: ignore[arg-type]  # (values checked not None)


def check_sources(call: DriverCall, plan: CopyPlan
                  ) -> tuple[list[CopyCheck], dict[str, list[SpanRecords]]]:
    """Read back and verify every source of `plan` (reads only)."""
    # The checksum's hashing imports pandas on first use (the executor's modules, numpy and
    # pandas are imported by the rare copy only, not by every driver that imports this module):
    # import it here, once, rather than in the pool's first reads.
    from twopc.executor.checksum import warm_up

    warm_up()
    held = call.state.in_use()
    checks: list[CopyCheck] = []
    reads: dict[str, list[SpanRecords]] = {}
    with ThreadPoolExecutor(_workers(plan.sources)) as pool:
        for source, (got, checksum) in zip(
                plan.sources, pool.map(lambda s: read_back(call, s), plan.sources), strict=True):
            check = verify_copy(source, got, checksum)
            why = held.get(source.transactional_id)
            if why is not None and check.verified:
                check = CopyCheck(source, (f"its transactional id is in use: {why}",),
                                  transient=True)
            checks.append(check)
            reads[source.transactional_id] = got
    return checks, reads


def _workers(sources: Sequence[Handle]) -> int:
    # Each source is read, and written, on its own: a few at once hide the round trips (the
    # control client's requests share one event loop; each copy has its own producer).
    return max(1, min(PARALLEL, len(sources)))


def try_copy(call: DriverCall, plan: CopyPlan, settings: RepairSettings) -> CopyOutcome:
    """Copy the lost part of `plan.batch` if the policy and the log allow; otherwise say why
    (RERUN) or raise CopyForwardFailed (FAIL). The copies come back pre-committed, for the caller
    to commit under an intent of its own."""
    began = time.monotonic()
    checks, reads = check_sources(call, plan) if settings.producer_config is not None else (
        [CopyCheck(s, ("no producer settings to copy with",)) for s in plan.sources], {})
    read_s = time.monotonic() - began
    decision = decide_repair(settings.policy, checks)
    if decision.action is RepairAction.FAIL:
        raise CopyForwardFailed(plan.batch, decision.reasons)
    if decision.action is RepairAction.RERUN:
        if decision.reasons:
            log.warning("twopc: batch %s not copied forward, repaired by the re-run instead: %s",
                        plan.batch, "; ".join(decision.reasons)[:2000])
        return CopyOutcome(decision, read_s=read_s)
    assert settings.producer_config is not None
    dups = call.fence_recorded(Duplicates(
        plan.batch, tuple(h.transactional_id for h in plan.duplicates)))
    crash_point("copy.after_duplicates")
    ids = tuple(s.transactional_id for s in plan.sources)
    call.append(Copying(plan.batch, ids, tuple(txn_key(s) for s in plan.sources)))
    held = call.claim(ids, "a copy's producer")
    if held:  # found stranded by the check the claim ran: their open transactions are not ours
        raise CopyForwardFailed(plan.batch, tuple(
            f"{tid}: its transactional id is in use: {why}" for tid, why in sorted(held.items())))
    crash_point("copy.after_record")

    def write(source: Handle) -> Handle:
        copy = _write_copy(call, plan.batch, source, reads[source.transactional_id], settings)
        crash_point("copy.after_write")
        return copy

    began = time.monotonic()
    with ThreadPoolExecutor(_workers(plan.sources)) as pool:
        copies = tuple(pool.map(write, plan.sources))
    write_s = time.monotonic() - began
    log.info("twopc: batch %s: %d transactions read back and verified in %.2f s, copied in %.2f s",
             plan.batch, len(copies), read_s, write_s)
    return CopyOutcome(decision, copies, dups, sum(h.record_count for h in copies), read_s,
                       write_s)


def _write_copy(call: DriverCall, batch: str, source: Handle, reads: Sequence[SpanRecords],
                settings: RepairSettings) -> Handle:
    from twopc.executor.rows import Row
    from twopc.executor.writer import write_partition

    assert settings.producer_config is not None
    rows = (Row(rec.value, rec.key, r.topic, r.partition, rec.headers, rec.timestamp)
            for r in reads for rec in r.records if rec.value is not None)
    result = write_partition(settings.producer_config, source.transactional_id, rows, batch=batch,
                             task_partition=source.task_partition, attempt=source.attempt,
                             default_topic=source.spans[0].topic if source.spans else None,
                             transaction_timeout_ms=settings.transaction_timeout_ms,
                             control=call.control)
    copy = result.handle
    if copy is None or (copy.record_count, copy.checksum) != (source.record_count,
                                                               source.checksum):
        got = "nothing" if copy is None else f"{copy.record_count} records, {copy.checksum}"
        raise CopyForwardFailed(batch, (
            f"{source.transactional_id}: the copy wrote {got}, the source holds "
            f"{source.record_count} records, {source.checksum}; the copy was left open and is "
            "fenced as an orphan",))
    return copy
