"""After the flush: which transaction the task wrote, told by the producer and by the brokers.

The handle the driver commits must name the task's own transaction: the producer's view (its
statistics' `eos` part: producer id, epoch, state) and the coordinator's (DescribeTransactions) must
agree, or another process holds the id (a zombie attempt) and the task fails without ending
anything; and the partition leaders must hold exactly the records the task produced (its spans,
twopc/executor/spans.py), or the task fails and its transaction is aborted (the writer's caller does that).

Design: docs/design.md section 2.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from twopc.control import ControlClient, TransactionDescription, TxnState
from twopc.crashpoints import wall_clock_ms
from twopc.executor.spans import read_spans
from twopc.executor.write_errors import (
    DeliveryError,
    EpochWithoutHeadroom,
    IdentificationError,
    SpanError,
    ZombieDetected,
)
from twopc.protocol.epochs import HIGHEST_HANDLE_EPOCH, releasable
from twopc.protocol.handle import Handle, PartitionSpan


class Statistics:
    """librdkafka's latest statistics sample (its stats_cb, also passed on to the user's)."""

    def __init__(self, interval_ms: int, user_cb: Callable[[str], None] | None) -> None:
        self.interval_ms = interval_ms
        self.user_cb = user_cb
        self.latest: str | None = None

    def on_stats(self, raw: str) -> None:
        self.latest = raw
        if self.user_cb is not None:
            self.user_cb(raw)

    def eos_after_flush(self, producer: Producer, transactional_id: str) -> dict[str, Any]:
        """librdkafka's `eos` statistics from a sample taken after the flush returned."""
        since_us = time.monotonic_ns() // 1000
        wait_s = max(3 * self.interval_ms / 1000, 2.0)
        deadline = time.monotonic() + wait_s
        seen: str | None = None
        while time.monotonic() < deadline:
            producer.poll(min(self.interval_ms / 2000, 0.05))
            raw = self.latest
            if raw is None or raw is seen:
                continue
            seen = raw
            stats = json.loads(raw)
            if int(stats.get("ts", 0)) >= since_us:  # librdkafka's ts: CLOCK_MONOTONIC in us
                eos = stats.get("eos")
                if isinstance(eos, dict):
                    return eos
        raise IdentificationError(
            f"transactional id {transactional_id!r}: librdkafka emitted no statistics within "
            f"{wait_s:.1f} s after the flush, so the transaction cannot be identified; the task "
            "fails")


def identify(control: ControlClient, tid: str, eos: dict[str, Any], *, rows: int, checksum: str,
             task_partition: int, attempt: int, begun_at: float) -> Handle:
    """The handle of the task's open transaction: ZombieDetected if the producer's view (`eos`)
    and the coordinator's disagree, SpanError or DeliveryError if the leaders cannot say, or do
    not hold, the `rows` records produced. `begun_at`: time.monotonic() before the transaction
    began (bounds what the writer's clock reading can say of the coordinator's, guards.py)."""
    pid, epoch = int(eos.get("producer_id", -1)), int(eos.get("producer_epoch", -1))
    state = str(eos.get("txn_state"))
    desc = control.describe_transactions([tid])[tid]
    writer_clock_ms = wall_clock_ms()  # after the answer: never before its start
    # Rounded up: the coordinator's clock cannot have read more than start + this then.
    elapsed_ms = math.ceil((time.monotonic() - begun_at) * 1000)
    view = f"{state} with producer id {pid} epoch {epoch}"
    if (state != "InTransaction" or desc.state is not TxnState.ONGOING
            or not desc.holds(pid, epoch)):
        raise ZombieDetected(tid, view, desc)
    if not releasable(epoch):
        # The one place a handle is made: none leaves without a release's headroom (headroom.py
        # normally rotates the producer id before the init; this catches a race with another
        # process's init). Not a zombie: the transaction is ours, and the writer aborts it.
        raise EpochWithoutHeadroom(tid, pid, epoch, HIGHEST_HANDLE_EPOCH)
    spans = _spans(control, tid, desc, pid, epoch, view, rows)
    return Handle(tid, pid, epoch, spans, rows, checksum, desc.start_ms, desc.timeout_ms,
                  task_partition, attempt, writer_clock_ms, writer_host=socket.gethostname(),
                  writer_elapsed_ms=elapsed_ms)


def _spans(control: ControlClient, tid: str, desc: TransactionDescription, pid: int, epoch: int,
           view: str, rows: int) -> tuple[PartitionSpan, ...]:
    """Per partition the coordinator lists, where the transaction starts and how many records it
    holds, from the leaders (twopc/executor/spans.py); their total must be the rows produced."""
    partitions = sorted(desc.partitions)
    reading = read_spans(partitions, control.describe_producers(partitions), pid, epoch,
                         control.topic_ids(sorted({topic for topic, _ in partitions})))
    if reading.unreadable:
        (topic, part), error = reading.unreadable[0]
        hint = (f": grant READ on topic {topic} to this principal"
                if error == "TOPIC_AUTHORIZATION_FAILED" else "")
        raise SpanError(f"transactional id {tid!r}: the leader of {topic} [{part}] "
                        f"answered DescribeProducers with {error}{hint}; the writer reads "
                        "there where its transaction starts and how many records it holds. "
                        "The transaction was aborted")
    if reading.not_open:
        # Fenced since the coordinator answered (a zombie attempt re-initialized the id)? Then
        # it is not ours to abort (see the writer's run()).
        again = control.describe_transactions([tid])[tid]
        if again.state is not TxnState.ONGOING or not again.holds(pid, epoch):
            raise ZombieDetected(tid, view, again)
    if reading.not_open or reading.record_count != rows:
        where = ", ".join(f"{t} [{p}]" for t, p in reading.not_open[:8])
        raise DeliveryError(
            None, None, None, None,
            f"the partition leaders hold {reading.record_count} records of this transaction "
            f"(producer id {pid} epoch {epoch}), the task produced {rows}"
            + (f"; no open transaction of it on {where}" if where else ""),
            abs(rows - reading.record_count))
    return reading.spans
