"""Committed transactions whose commit markers the broker dropped: found and released.

Kafka up to 4.3.1 can lose a commit for good when a broker is SIGKILLed while commit markers are
pending (tests/broker/test_restart_mid_commit.py): after the restart the coordinator records
CompleteCommit without writing the markers, and the data partitions keep the transaction open.
Their last stable offset then stays at its first record: read_committed consumers stop there, and
the records twopc committed are invisible. A retried EndTxn or a fence sends nothing.

The cure is a new transaction on the same transactional id (same producer id, next epoch) that
adds the stuck partitions and commits (`ControlClient.release_stranded`): its COMMIT markers end
the stranded transaction as committed. Recovery looks for this after it settled the intents, over
the committed batches the log still holds: cheap when nothing is stuck (one read_committed
ListOffsets per leader), exact when something is (DescribeProducers names whose open transaction
holds a partition back). `judge` is the pure decision; `release_stranded_commits` asks and acts,
after a record that names the ids (DESIGN.md section 5).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from twopc.control import ControlClient, ReleaseResult, TransactionDescription
from twopc.control import TxnState as S
from twopc.decisions import BatchState, BatchStatus
from twopc.handle import Handle, PartitionSpan
from twopc.records import Released
from twopc.session import Session

log = logging.getLogger("twopc.stranded")

# Markers usually land within milliseconds of the EndTxn answer (a commit checks its own batch
# right after it): ask again soon, then back off.
_FIRST_POLL_S = 0.01
_POLL_S = 0.2
TopicPartition = tuple[str, int]


class StrandedFate(enum.Enum):
    SETTLED = "settled"  # no span of the handle holds a partition back
    WAIT = "wait"  # the markers may still be on their way: ask again (bounded)
    RELEASE = "release"  # the coordinator is done, the partitions are not: release them
    LIVE_WRITER = "live_writer"  # the id is open again with a newer epoch: never touched
    CANNOT = "cannot"  # this id cannot end it (another producer id, unknown id, contradiction)


@dataclass(frozen=True)
class StrandedVerdict:
    fate: StrandedFate
    reason: str = ""


def judge(handle: Handle, desc: TransactionDescription | None,
          stuck: Sequence[PartitionSpan]) -> StrandedVerdict:
    """What to do with a committed handle whose `stuck` spans are still held open by its own
    producer id, given what the coordinator says of its transactional id now."""
    if not stuck:
        return StrandedVerdict(StrandedFate.SETTLED)
    where = ", ".join(f"{s.topic}[{s.partition}]@{s.first_offset}" for s in stuck)
    if desc is None or desc.state is S.UNKNOWN_ID:
        return StrandedVerdict(StrandedFate.CANNOT, f"{where} held open, and the coordinator no "
                               "longer knows the id (a new one would get another producer id)")
    if desc.producer_id != handle.producer_id:
        return StrandedVerdict(StrandedFate.CANNOT, f"{where} held open by producer id "
                               f"{handle.producer_id}, but the id now has producer id "
                               f"{desc.producer_id}, whose markers cannot end it")
    newer = desc.producer_epoch > handle.epoch
    if desc.producer_epoch < handle.epoch:
        return StrandedVerdict(StrandedFate.CANNOT, f"the coordinator's epoch "
                               f"{desc.producer_epoch} is below the committed {handle.epoch}")
    if desc.state is S.ONGOING:
        if newer:
            return StrandedVerdict(StrandedFate.LIVE_WRITER, f"{where} held open, but the id is "
                                   f"Ongoing with epoch {desc.producer_epoch}: a live writer")
        return StrandedVerdict(StrandedFate.CANNOT, "the coordinator shows the committed "
                               "transaction still Ongoing")
    if desc.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE):
        return StrandedVerdict(StrandedFate.WAIT, f"{desc.state.value}: markers on their way")
    # CompleteCommit is written only once every marker was acknowledged; a later InitProducerId
    # (Empty, or a newer transaction ended) waits for that too. So the partitions lost them.
    if desc.state is S.COMPLETE_COMMIT or (newer and desc.state in (S.EMPTY, S.COMPLETE_ABORT)):
        return StrandedVerdict(StrandedFate.RELEASE, f"{where} held open while the coordinator "
                               f"shows {desc.state.value} (epoch {desc.producer_epoch})")
    return StrandedVerdict(StrandedFate.CANNOT, f"the coordinator shows {desc.state.value} with "
                           f"epoch {desc.producer_epoch} for a committed transaction")


def stuck_spans(handle: Handle, lso: Mapping[TopicPartition, int],
                open_at: Mapping[TopicPartition, Iterable[tuple[int, int]]]) -> list[PartitionSpan]:
    """The handle's spans whose partition is held back by the handle's own open transaction:
    last stable offset at or below the span's first offset, and the partition's producer state
    showing this producer id with a transaction open from exactly that offset. `open_at` maps a
    partition to its (producer id, open transaction's first offset) pairs."""
    out: list[PartitionSpan] = []
    for s in handle.spans:
        tp = (s.topic, s.partition)
        if tp in lso and lso[tp] <= s.first_offset and \
                (handle.producer_id, s.first_offset) in set(open_at.get(tp, ())):
            out.append(s)
    return out


def committed_handles(batches: Iterable[BatchState]) -> list[tuple[str, Handle]]:
    """(batch, handle) for every visible handle of the committed or partly committed batches."""
    return [(b.batch, h) for b in batches
            if b.status in (BatchStatus.COMMITTED, BatchStatus.PARTIAL)
            for _, h in sorted(b.committed.items())]


# ---- the I/O ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StrandedNote:
    batch: str
    transactional_id: str
    fate: StrandedFate
    reason: str
    partitions: tuple[TopicPartition, ...] = ()


@dataclass
class StrandedReport:
    checked: int = 0  # handles looked at
    notes: list[StrandedNote] = field(default_factory=list)
    releases: dict[str, ReleaseResult] = field(default_factory=dict)

    @property
    def released(self) -> tuple[str, ...]:
        return tuple(sorted(t for t, r in self.releases.items() if r.released))

    @property
    def unreleased(self) -> list[StrandedNote]:
        """Stranded or possibly stranded transactions left as they are (reported, with why)."""
        failed = {t for t, r in self.releases.items() if not r.released}
        return [n for n in self.notes if n.fate is not StrandedFate.RELEASE
                or n.transactional_id in failed]

    def merged(self, other: StrandedReport) -> StrandedReport:
        """Both checks' findings (recovery checks before its sweep and after it commits)."""
        return StrandedReport(self.checked + other.checked, [*self.notes, *other.notes],
                              {**self.releases, **other.releases})

    def summary(self) -> str:
        parts = []
        if self.released:
            parts.append(f"released {len(self.released)} stranded commits")
        for n in self.unreleased:
            why = n.reason
            if n.transactional_id in self.releases:
                r = self.releases[n.transactional_id]
                why = f"release failed at {r.step}: {r.error}"
            parts.append(f"{n.transactional_id} (batch {n.batch}) {n.fate.value}: {why}")
        return "; ".join(parts)


def release_stranded_commits(session: Session, control: ControlClient,
                             batches: Iterable[BatchState], *, wait_ms: int, grace_ms: int,
                             clock: Callable[[], float] = time.monotonic) -> StrandedReport:
    """Find the committed handles of `batches` whose partitions their open transaction still holds
    back, wait (bounded) while markers may be on their way, then record and release them."""
    handles = committed_handles(batches)
    report = StrandedReport(checked=len(handles))
    if not handles:
        return report
    lso = control.last_stable_offsets([(s.topic, s.partition) for _, h in handles
                                       for s in h.spans])
    suspects = [(b, h) for b, h in handles
                if any(lso.get((s.topic, s.partition), s.first_offset + 1) <= s.first_offset
                       for s in h.spans)]
    if not suspects:
        return report  # the usual case: one ListOffsets per leader
    verdicts, stuck = _observe(control, suspects, wait_ms, grace_ms, clock)
    for b, h in suspects:
        v = verdicts[_key(h)]
        if v.fate is not StrandedFate.SETTLED:
            report.notes.append(StrandedNote(b, h.transactional_id, v.fate, v.reason, tuple(
                (s.topic, s.partition) for s in stuck[_key(h)])))
    to_release: dict[str, set[TopicPartition]] = {}
    pids: dict[str, int] = {}
    for n in report.notes:
        if n.fate is StrandedFate.RELEASE:
            to_release.setdefault(n.transactional_id, set()).update(n.partitions)
    for _, h in suspects:
        pids[h.transactional_id] = h.producer_id
    if to_release:
        batches_named = tuple(sorted({n.batch for n in report.notes
                                      if n.fate is StrandedFate.RELEASE}))
        session.append(Released(batches_named, tuple(sorted(to_release)), tuple(
            (t, topic, p) for t, tps in sorted(to_release.items()) for topic, p in sorted(tps))))
        for tid, tps in sorted(to_release.items()):
            result = control.release_stranded(tid, sorted(tps), producer_id=pids[tid])
            report.releases[tid] = result
            if not result.released:
                log.error("stranded commit of %s on %s could not be released: %s at %s", tid,
                          sorted(tps), result.error, result.step)
    for n in report.unreleased:
        log.error("a committed transaction still holds partitions open: %s (batch %s): %s",
                  n.transactional_id, n.batch, n.reason)
    return report


def _key(h: Handle) -> tuple[str, int, int]:
    return (h.transactional_id, h.producer_id, h.epoch)


def _observe(control: ControlClient, suspects: Sequence[tuple[str, Handle]], wait_ms: int,
             grace_ms: int, clock: Callable[[], float]
             ) -> tuple[dict[tuple[str, int, int], StrandedVerdict],
                        dict[tuple[str, int, int], list[PartitionSpan]]]:
    """Ask until every suspect is settled or proven stranded twice, `grace_ms` apart, or until
    `wait_ms` ran out (then what is still waiting is reported as such)."""
    start = clock()
    delay = _FIRST_POLL_S
    first_release: dict[tuple[str, int, int], float] = {}
    while True:
        now = clock()
        # The coordinator first: once it shows a completed state, every marker was acknowledged,
        # so a partition still held open after that lost its marker.
        desc = control.describe_transactions(sorted({h.transactional_id for _, h in suspects}))
        spans = {(s.topic, s.partition): s for _, h in suspects for s in h.spans}
        lso = control.last_stable_offsets(sorted(spans))
        held = sorted(tp for tp, s in spans.items() if tp in lso and lso[tp] <= s.first_offset)
        open_at: dict[TopicPartition, list[tuple[int, int]]] = {
            tp: [(a.producer_id, a.current_txn_start_offset) for a in state.producers]
            for tp, state in (control.describe_producers(held).items() if held else ())}
        verdicts: dict[tuple[str, int, int], StrandedVerdict] = {}
        stuck: dict[tuple[str, int, int], list[PartitionSpan]] = {}
        for _, h in suspects:
            stuck[_key(h)] = stuck_spans(h, lso, open_at)
            verdicts[_key(h)] = judge(h, desc.get(h.transactional_id), stuck[_key(h)])
        pending = False
        for k, v in verdicts.items():
            if v.fate is StrandedFate.RELEASE:
                first_release.setdefault(k, now)
                pending |= now - first_release[k] < grace_ms / 1000
            else:
                first_release.pop(k, None)
                pending |= v.fate is StrandedFate.WAIT
        out_of_time = now - start >= wait_ms / 1000
        if not pending or out_of_time:
            for k, v in verdicts.items():
                if v.fate is StrandedFate.RELEASE and now - first_release[k] < grace_ms / 1000:
                    verdicts[k] = StrandedVerdict(StrandedFate.WAIT, "seen stranded only once "
                                                  f"within {wait_ms} ms: " + v.reason)
                elif v.fate is StrandedFate.WAIT:
                    verdicts[k] = StrandedVerdict(StrandedFate.WAIT, f"still after {wait_ms} ms: "
                                                  + v.reason)
            return verdicts, stuck
        time.sleep(delay)
        delay = min(delay * 2, _POLL_S)
