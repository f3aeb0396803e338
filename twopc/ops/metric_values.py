"""What the metrics exporter reports, computed from the broker's and the log's answers. Pure: no I/O.

A read_committed consumer of a partition reads up to its last stable offset (LSO): the first offset
of the oldest transaction still open there. The *holdback* is the high watermark minus the LSO,
what such consumers cannot see yet; the transaction that *pins* the partition is the open one whose
first offset is lowest (DescribeProducers' `current_txn_start_offset`). Its producer id leads to its
transactional id (ListTransactions by producer id), that to its start and timeout
(DescribeTransactions), and, with a checkpoint log, the (producer id, epoch) to the batch whose
records name it and the query or job that owns the log.

The I/O that gathers these answers and serves them is twopc/ops/metrics.py; the names and labels of
the metrics are documented in docs/operations.md (*Metrics*).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from twopc.control import TransactionDescription, TransactionListing
from twopc.control.partition_messages import ActiveProducer, ProducerState
from twopc.protocol.enums import TextEnum
from twopc.protocol.log_records import Aborted, LogRecord, Prepared
from twopc.protocol.owner import Owner
from twopc.protocol.pool import in_pool
from twopc.protocol.state import BatchStatus, LogState


class Role(TextEnum):
    """What the checkpoint log says of a pinning transaction (label `role`)."""

    PENDING = "pending"  # named by an intent without outcome: recovery rolls it forward
    COMMITTED = "committed"  # committed by its batch: markers on their way, or stranded
    RECORDED = "recorded"  # named by a record of a batch that ended otherwise (aborted, fenced)
    POOL = "pool"  # an id of the log's pool that no record names: a task writing now, or an orphan
    OTHER = "other"  # not an id of the log's pool: another writer of the topic
    UNKNOWN = "unknown"  # no checkpoint log was given


# ---- the log: which batch names a transaction ---------------------------------------------------


@dataclass(frozen=True)
class LogRef:
    """A transaction a record of the log names."""

    transactional_id: str
    batch: str
    role: Role
    start_ms: int  # as recorded (the coordinator's start of the transaction)
    timeout_ms: int


@dataclass(frozen=True)
class LogIndex:
    """The transactions a checkpoint log names, by (producer id, epoch)."""

    owner: Owner
    by_producer: Mapping[tuple[int, int], LogRef] = field(default_factory=dict)

    def find(self, producer_id: int, epoch: int, transactional_id: str | None
             ) -> tuple[str, str, Role]:
        """(owner id, batch, role) of the transaction; batch "" when no record names it."""
        ref = self.by_producer.get((producer_id, epoch))
        if ref is not None and transactional_id in (None, ref.transactional_id):
            return self.owner.owner_id, ref.batch, ref.role
        if transactional_id is not None and in_pool(self.owner.prefix, transactional_id):
            return self.owner.owner_id, "", Role.POOL
        return "", "", Role.OTHER


def log_index(owner: Owner, records: Iterable[tuple[int, LogRecord]], state: LogState) -> LogIndex:
    """Every transaction that an intent (or a refused re-run's Aborted record) of the log names,
    with the batch and what became of it; a later record naming the same (producer id, epoch)
    wins."""
    named: dict[tuple[int, int], tuple[str, Any]] = {}
    for _, rec in records:
        if isinstance(rec, Prepared | Aborted):
            for h in rec.handles:
                named[(h.producer_id, h.epoch)] = (rec.batch, h)
    out: dict[tuple[int, int], LogRef] = {}
    for key, (batch, h) in named.items():
        b = state.batch(batch)
        if h in b.committed.values():
            role = Role.COMMITTED
        elif b.status is BatchStatus.PREPARED and h in b.intent:
            role = Role.PENDING
        else:
            role = Role.RECORDED
        out[key] = LogRef(h.transactional_id, batch, role, h.start_ms, h.timeout_ms)
    return LogIndex(owner, out)


# ---- the broker: who pins each partition --------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """The open transaction that holds a partition's last stable offset back."""

    producer_id: int
    producer_epoch: int
    first_offset: int  # its first record in the partition: where read_committed consumers stop
    transactional_id: str | None  # None: no coordinator named it (ListTransactions)
    state: str | None  # the coordinator's (Ongoing, PrepareCommit, CompleteCommit, ...)
    start_ms: int | None  # the coordinator's clock
    timeout_ms: int | None
    age_ms: int | None  # this machine's clock against `start_ms`
    owner: str = ""  # the query or job id of the log that names it ("" if none)
    batch: str = ""  # the batch whose records name it ("" if none)
    role: Role = Role.UNKNOWN

    @property
    def age_ratio(self) -> float | None:
        """age / timeout: at 1.0 the coordinator aborts it (if it is still Ongoing)."""
        if self.age_ms is None or not self.timeout_ms:
            return None
        return self.age_ms / self.timeout_ms


@dataclass(frozen=True)
class PartitionHold:
    """One partition: how far read_committed consumers are held back, and by what."""

    topic: str
    partition: int
    high_watermark: int | None  # None: its leader did not answer
    last_stable_offset: int | None
    open_transactions: int | None  # None: DescribeProducers failed for it
    pin: Pin | None
    error: str | None = None  # why something is missing (the broker's error name)

    @property
    def holdback(self) -> int | None:
        """High watermark minus LSO, in offsets (records, and the markers among them); None when
        either is unknown. Never negative: the two are read one after the other."""
        if self.high_watermark is None or self.last_stable_offset is None:
            return None
        return max(0, self.high_watermark - self.last_stable_offset)


def open_producers(state: ProducerState) -> list[ActiveProducer]:
    """The producers with a transaction open in the partition, oldest first offset first."""
    return sorted((p for p in state.producers if p.current_txn_start_offset >= 0),
                  key=lambda p: (p.current_txn_start_offset, p.producer_id))


def pinning_producer_ids(producers: Mapping[tuple[str, int], ProducerState]) -> list[int]:
    """The producer ids that pin some partition: whose transactional ids to ask for."""
    return sorted({opened[0].producer_id for s in producers.values() if s.error_code == 0
                   for opened in [open_producers(s)] if opened})


def partition_holds(partitions: Sequence[tuple[str, int]], high: Mapping[tuple[str, int], int],
                    stable: Mapping[tuple[str, int], int],
                    producers: Mapping[tuple[str, int], ProducerState],
                    listings: Sequence[TransactionListing],
                    descriptions: Mapping[str, TransactionDescription],
                    index: LogIndex | None, now_ms: int) -> list[PartitionHold]:
    """Each partition's hold, from the answers: ListOffsets at both isolation levels, DescribeProducers,
    ListTransactions (by the pinning producer ids), DescribeTransactions (of the ids listed) and
    the log's index (None: no checkpoint given)."""
    by_pid = {t.producer_id: t for t in listings}
    out: list[PartitionHold] = []
    for tp in sorted(set(partitions)):
        errors: list[str] = []
        if tp not in high or tp not in stable:
            errors.append("ListOffsets: no answer from the partition's leader")
        state = producers.get(tp)
        opened: list[ActiveProducer] | None = None
        if state is None:
            errors.append("DescribeProducers: no answer")
        elif state.error_code != 0:
            errors.append(f"DescribeProducers: error {state.error_code}"
                          + (f" ({state.error_message})" if state.error_message else ""))
        else:
            opened = open_producers(state)
        pin = _pin(opened[0], by_pid, descriptions, index, now_ms) if opened else None
        out.append(PartitionHold(tp[0], tp[1], high.get(tp), stable.get(tp),
                                 None if opened is None else len(opened), pin,
                                 "; ".join(errors) or None))
    return out


def _pin(p: ActiveProducer, by_pid: Mapping[int, TransactionListing],
         descriptions: Mapping[str, TransactionDescription], index: LogIndex | None,
         now_ms: int) -> Pin:
    listing = by_pid.get(p.producer_id)
    tid = listing.transactional_id if listing is not None else None
    ref = index.by_producer.get((p.producer_id, p.producer_epoch)) if index is not None else None
    if tid is None and ref is not None:
        tid = ref.transactional_id  # the coordinator did not answer for it; the log names it
    desc = descriptions.get(tid) if tid is not None else None
    if desc is not None and desc.producer_id != p.producer_id:
        desc = None  # the id has another producer id now: its description is not this one's
    state = desc.state.value if desc is not None else (
        listing.state.value if listing is not None else None)
    start = desc.start_ms if desc is not None and desc.start_ms > 0 else (
        ref.start_ms if ref is not None else None)
    timeout = desc.timeout_ms if desc is not None and desc.timeout_ms > 0 else (
        ref.timeout_ms if ref is not None else None)
    owner, batch, role = index.find(p.producer_id, p.producer_epoch, tid) if index is not None \
        else ("", "", Role.UNKNOWN)
    return Pin(p.producer_id, p.producer_epoch, p.current_txn_start_offset, tid, state, start,
               timeout, None if start is None else max(0, now_ms - start), owner, batch, role)


# ---- the metric families of one look at the cluster ---------------------------------------------

PARTITION_LABELS = ("topic", "partition")
INFO_LABELS = ("topic", "partition", "transactional_id", "producer_id", "producer_epoch", "state",
               "owner", "batch", "role")


def partition_families(holds: Sequence[PartitionHold]) -> list[Metric]:
    """The per-partition gauges. The pinning transaction's ids are labels of one info metric only
    (value 1), whose series exist while it pins: the other gauges keep the bounded labels topic
    and partition, and offsets are never labels."""
    def gauge(name: str, doc: str, labels: Sequence[str] = PARTITION_LABELS) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=labels)

    hw = gauge("twopc_partition_high_watermark_offset",
               "The partition's high watermark (ListOffsets latest, read_uncommitted).")
    lso = gauge("twopc_partition_last_stable_offset",
                "Where read_committed consumers stop: the first offset of the oldest open "
                "transaction, else the high watermark.")
    held = gauge("twopc_partition_lso_holdback_records",
                 "High watermark minus last stable offset: the offsets (records and markers) that "
                 "open transactions hold back from read_committed consumers.")
    opened = gauge("twopc_partition_open_transactions",
                   "Transactions open in the partition (DescribeProducers).")
    age = gauge("twopc_open_transaction_age_seconds",
                "Age of the open transaction that pins the partition (the oldest), on this "
                "machine's clock against the coordinator's start time.")
    timeout = gauge("twopc_open_transaction_timeout_seconds",
                    "Transaction timeout of the transaction that pins the partition.")
    ratio = gauge("twopc_open_transaction_age_ratio",
                  "Age / timeout of the transaction that pins the partition: at 1 the "
                  "coordinator aborts it.")
    info = gauge("twopc_open_transaction_info",
                 "The transaction that pins the partition (value 1): its ids, the coordinator's "
                 "state, and the batch and owner of the checkpoint log that name it.", INFO_LABELS)
    for h in holds:
        where = [h.topic, str(h.partition)]
        _add(hw, where, h.high_watermark)
        _add(lso, where, h.last_stable_offset)
        _add(held, where, h.holdback)
        _add(opened, where, h.open_transactions)
        pin = h.pin
        if pin is None:
            continue
        _add(age, where, None if pin.age_ms is None else pin.age_ms / 1000)
        _add(timeout, where, None if pin.timeout_ms is None else pin.timeout_ms / 1000)
        _add(ratio, where, pin.age_ratio)
        info.add_metric([*where, pin.transactional_id or "", str(pin.producer_id),
                         str(pin.producer_epoch), pin.state or "", pin.owner, pin.batch,
                         pin.role.value], 1)
    return [hw, lso, held, opened, age, timeout, ratio, info]


def _add(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None and math.isfinite(value):
        family.add_metric(labels, value)


# ---- the journal: per-batch figures and recoveries ----------------------------------------------

RECOVERY_ACTIONS = {
    "rolled_forward": "rolled_forward", "orphans_fenced": "orphan_fenced",
    "fence_failures": "fence_failed", "stranded_released": "stranded_released",
    "stranded_unreleased": "stranded_unreleased",
}


@dataclass(frozen=True)
class BatchObservation:
    """One driver call's figures, as the journal (twopc/spark/journal.py) keeps them."""

    owner: str
    batch: str
    event: str  # commit / abort
    outcome: str
    at_ms: int
    latency_s: float
    oldest_txn_age_ratio: float | None


def batch_observation(entry: Mapping[str, Any]) -> BatchObservation:
    """From a journal batch entry (as `Journal.read_batch` returns it: its shape checked)."""
    fig = entry["figures"]
    ratio = fig.get("oldest_txn_age_ratio")
    return BatchObservation(str(entry["owner_id"]), str(fig.get("batch", "")),
                            str(fig.get("event", "")), str(fig.get("outcome", "")),
                            int(entry["at_ms"]), float(fig["commit_latency_ms"]) / 1000,
                            None if ratio is None else float(ratio))


@dataclass(frozen=True)
class RecoveryObservation:
    """One recovery that acted."""

    owner: str
    where: str  # prepare / commit / abort
    at_ms: int
    batch_outcomes: tuple[str, ...]  # each settled batch's outcome
    actions: Mapping[str, int]  # transactions per action (RECOVERY_ACTIONS' values)


def recovery_observation(owner: str, summary: Mapping[str, Any], at_ms: int
                         ) -> RecoveryObservation | None:
    """From a `recovery_report` summary (observe.recovery_summary); None if it did nothing."""
    if not summary.get("acted"):
        return None
    batches = summary.get("batches")
    outcomes = tuple(str(v) for _, v in sorted(batches.items())) if isinstance(batches, dict) else ()
    actions = {name: len(summary[key]) for key, name in RECOVERY_ACTIONS.items()
               if isinstance(summary.get(key), list | dict) and summary[key]}
    return RecoveryObservation(owner, str(summary.get("where", "")), at_ms, outcomes, actions)


# A batch entry's recovery was written to recovery.json by the same call just before the entry.
SAME_CALL_MS = 60_000


class JournalFollow:
    """Which journal entries are news, for an exporter that reads the journal beside a log.

    The journal keeps a file per batch; only the log says which batches exist. Each look at the
    log names the batches to read: those whose records changed since the last look, and the last
    `recent` ones (a batch's journal entry is written just after its outcome record, so the look
    that first sees the record may come before it). An entry counts once, and only if it was
    written after the exporter started (`since_ms`): counters count what happened while it ran.

    A recovery that acted is in ``recovery.json`` (overwritten by the next one) and, when a batch's
    commit or abort ran it, in that batch's entry as well, written a moment later by the same
    call. It counts once: an entry's copy of a recovery read from ``recovery.json`` (same content,
    written up to SAME_CALL_MS before the entry) is not counted again, and neither is the other
    way round; a recovery overwritten before it was read still counts from its batch's entry.
    """

    def __init__(self, since_ms: int, recent: int = 3) -> None:
        self.since_ms = since_ms
        self.recent = recent
        self._looked = False
        self._last_seq: dict[str, int] = {}
        self._seen: set[tuple[str, str, int]] = set()
        self._recoveries: deque[tuple[str, int, bool]] = deque(maxlen=200)

    def batches_to_read(self, state: LogState) -> list[str]:
        # At the first look, what changed before the start is not news: only the recent ones
        # may have an entry written since.
        changed = [b.batch for b in state.batches.values()
                   if self._looked and self._last_seq.get(b.batch) != b.last_seq]
        self._looked = True
        latest = [b.batch for b in sorted(state.batches.values(), key=lambda b: b.last_seq)]
        self._last_seq = {b.batch: b.last_seq for b in state.batches.values()}
        # What was counted of batches the log no longer holds (purged) need not be remembered.
        self._seen = {key for key in self._seen if key[0] in self._last_seq}
        return list(dict.fromkeys([*changed, *latest[-self.recent:]]))

    def take_batch(self, batch: str, event: str, entry: Mapping[str, Any] | None
                   ) -> BatchObservation | None:
        if entry is None or int(entry["at_ms"]) < self.since_ms:
            return None
        key = (batch, event, int(entry["at_ms"]))
        if key in self._seen:
            return None
        self._seen.add(key)
        return batch_observation(entry)

    def take_recovery(self, owner: str, summary: Mapping[str, Any] | None, at_ms: int, *,
                      in_entry: bool) -> RecoveryObservation | None:
        """`summary` from ``recovery.json`` (`at_ms` its time) or, `in_entry`, from a batch entry
        (`at_ms` the entry's time)."""
        if summary is None or at_ms < self.since_ms:
            return None
        obs = recovery_observation(owner, summary, at_ms)
        if obs is None:
            return None
        mark = json.dumps(summary, sort_keys=True, default=str)
        for seen, seen_at, seen_in_entry in self._recoveries:
            if seen != mark:
                continue
            if seen_at == at_ms and seen_in_entry == in_entry:
                return None  # this one, read again
            entry_at, file_at = (at_ms, seen_at) if in_entry else (seen_at, at_ms)
            if seen_in_entry != in_entry and 0 <= entry_at - file_at <= SAME_CALL_MS:
                return None  # the same recovery, read from the other place
        self._recoveries.append((mark, at_ms, in_entry))
        return obs
