"""What a transaction wrote to each partition, as the partition leaders tell it. Pure.

The writer needs, per partition of its transaction, the offset of its first record (recovery's log
check and the stranded-commit check look there) and how many records it wrote. It does not ask one
delivery report per record for them: a Python callback per record costs about as much CPU as
producing the record. It asks the leaders once, after the flush, with DescribeProducers: a producer's
entry there carries the first offset of its open transaction (what holds the last stable offset back)
and its last sequence number. Sequences restart at 0 with each producer epoch, and the writer opens
each transaction with a new producer (InitProducerId: a new epoch), so the last sequence plus one is
the number of records the transaction appended to that partition (the idempotent broker appends each
sequence once, in order).

The partitions come from the transaction coordinator (DescribeTransactions), not from the producer:
both sides must then agree on the total, which `read_spans` leaves to its caller to compare with the
rows it produced.

Design: docs/design.md section 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from twopc.control.errors import error_name
from twopc.control.partition_messages import ProducerState
from twopc.protocol.handle import PartitionSpan

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SpanReading:
    spans: tuple[PartitionSpan, ...]  # the partitions where the transaction is open, in order
    unreadable: tuple[tuple[TopicPartition, str], ...]  # the leader's error, by partition
    not_open: tuple[TopicPartition, ...]  # listed by the coordinator, no open transaction there

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.spans)


def read_spans(partitions: Sequence[TopicPartition],
               states: Mapping[TopicPartition, ProducerState], producer_id: int, epoch: int,
               topic_ids: Mapping[str, str]) -> SpanReading:
    """The spans of the transaction of (`producer_id`, `epoch`) on `partitions`, from the leaders'
    producer states; a partition without an answer counts as unreadable."""
    spans: list[PartitionSpan] = []
    unreadable: list[tuple[TopicPartition, str]] = []
    not_open: list[TopicPartition] = []
    for tp in sorted(set(partitions)):
        state = states.get(tp)
        if state is None:
            unreadable.append((tp, "no answer"))
            continue
        if state.error_code:
            unreadable.append((tp, error_name(state.error_code)))
            continue
        ours = [a for a in state.producers if a.producer_id == producer_id
                and a.producer_epoch == epoch and a.current_txn_start_offset >= 0
                and a.last_sequence >= 0]
        if len(ours) != 1:
            not_open.append(tp)
            continue
        first, count = ours[0].current_txn_start_offset, ours[0].last_sequence + 1
        spans.append(PartitionSpan(tp[0], tp[1], first, None, count, topic_ids.get(tp[0])))
    return SpanReading(tuple(spans), tuple(unreadable), tuple(not_open))
