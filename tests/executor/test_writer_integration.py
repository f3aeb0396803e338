"""The writer against a real broker: pre-commit, drop, commit, and every way a write must fail.

"Nothing visible" is always checked the same way: the audit (read_committed) finds none of the
task's ids and, once the transaction has ended, no partition's LSO lags its high watermark.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path

import pytest

from tests.driver.epochs import EXHAUSTED, drive_one
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, EndTxnRequest, TransactionDescription, TxnState
from twopc.executor.checksum import checksum_of
from twopc.executor.rows import Columns, Row
from twopc.executor.write_errors import (
    DeliveryError,
    EpochWithoutHeadroom,
    RowError,
    TransactionBudgetExceeded,
    ZombieDetected,
)
from twopc.executor.writer import CHUNK, write_partition
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.protocol.epochs import releasable
from twopc.protocol.handle import ResultKind, WriteResult

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _tid() -> str:
    return f"wtest-{uuid.uuid4().hex[:10]}"


def _write(broker: KafkaUnderTest, topic: str, rows: object, control: ControlClient | None,
           timeout_ms: int = 30000, tid: str | None = None, **kw: object) -> WriteResult:
    return write_partition(broker.config(), tid or _tid(), rows, batch="7",  # type: ignore[arg-type]
                           task_partition=3, attempt=1, default_topic=topic,
                           transaction_timeout_ms=timeout_ms, control=control, **kw)  # type: ignore[arg-type]


def _nothing_visible(broker: KafkaUnderTest, topic: str) -> None:
    assert wait_until_stable(broker.config(), topic, 60), "a transaction stayed open"
    report = audit_topic(broker.config(), topic, expected_ids=[])
    assert report.records == 0 and report.passed, report.summary()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.all_variants
def test_precommitted_write_survives_the_drop_and_commits_exactly_once(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    topic, other = make_topic(3), make_topic(2)
    ids = [f"w-{i}" for i in range(2500)]
    rows = [Row(v.encode(), key=str(i % 7).encode(), headers=(("n", str(i).encode()),))
            if i % 2 else {"value": v.encode(), "topic": other if i % 5 == 0 else None}
            for i, v in enumerate(ids)]
    import pandas.util  # noqa: F401  (its import may start threads of its own: count after it)

    gc.collect()  # other clients of earlier tests are destroyed now, not during the count below
    threads = _threads()
    # The writer's producer must go when the writer drops it, not at the next cyclic collection
    # (its threads, connections and 10 ms statistics timer would linger into the next task and
    # the collection would pay its teardown there): no reference cycle may hold it.
    gc.disable()
    try:
        result = _write(broker, topic, rows, control)
    finally:
        gc.enable()
    # librdkafka's threads (at least three per producer) are joined by its destroy: the
    # producer really is gone ...
    assert _threads() <= threads
    h = result.handle
    assert result.kind is ResultKind.PRECOMMITTED and h is not None and result.rows == len(ids)
    assert (result.batch, result.task_partition, result.attempt) == ("7", 3, 1)
    # ... and its transaction is still open, exactly as the handle says.
    desc = control.describe_transactions([h.transactional_id])[h.transactional_id]
    assert desc.state is TxnState.ONGOING and desc.holds(h.producer_id, h.epoch)
    assert (desc.start_ms, desc.timeout_ms) == (h.start_ms, h.timeout_ms)
    assert {(s.topic, s.partition) for s in h.spans} == set(desc.partitions)
    assert sum(s.record_count for s in h.spans) == h.record_count == len(ids)
    assert all(s.first_offset == 0 for s in h.spans)  # both topics are new: ours from offset 0
    assert {s.topic_id for s in h.spans if s.topic == topic} == set(
        control.topic_ids([topic]).values())
    assert h.writer_clock_ms >= h.start_ms - 60_000
    # The broker runs on this host: the writer's reading lies within what the coordinator's clock
    # allows (guards.latest_coordinator_reading), up to the clocks' millisecond rounding.
    assert h.writer_host == socket.gethostname() and h.writer_elapsed_ms is not None
    assert h.start_ms - 5 <= h.writer_clock_ms <= h.start_ms + h.writer_elapsed_ms + 5
    assert WriteResult.from_obj(result.to_obj()) == result
    assert audit_topic(broker.config(), topic, settle_s=0).records == 0  # pre-committed: not visible yet

    outcome = control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    assert outcome[h.transactional_id].committed
    assert wait_until_stable(broker.config(), topic, 60)
    assert wait_until_stable(broker.config(), other, 60)
    # The leaders' counts (twopc/executor/spans.py) are the log's: each partition holds the span's records
    # and then the commit marker, and a partition without a span holds nothing.
    counts = {(s.topic, s.partition): s.record_count for s in h.spans}
    for t in (topic, other):
        for part, (_, hw) in partition_offsets(broker.config(), t).items():
            assert hw == (counts[(t, part)] + 1 if (t, part) in counts else 0), (t, part, hw)
    first = audit_topic(broker.config(), topic)
    second = audit_topic(broker.config(), other)
    assert first.passed and second.passed, (first.summary(), second.summary())
    seen = first.counts + second.counts
    assert sorted(seen) == sorted(ids) and set(seen.values()) == {1}
    assert second.records == len([i for i in range(len(ids)) if i % 2 == 0 and i % 5 == 0])


def test_columns_write_what_the_same_rows_write(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    """The columnar path (blocks of values and keys, as from Arrow) produces the same records,
    handle and checksum as the same rows one `Row` at a time, across blocks and chunks."""
    topic = make_topic(3)
    n = 2 * CHUNK + 17
    ids = [f"c-{i}" for i in range(n)]
    keys = [None if i % 3 == 0 else str(i % 11).encode() for i in range(n)]
    sizes = [5, 0, CHUNK + 3, 1, n]  # block boundaries; an empty block included
    blocks: list[Columns | Row] = []
    start = 0
    for size in sizes:
        end = min(start + size, n)
        values = [v.encode() for v in ids[start:end]]
        blocks.append(Columns(values, keys[start:end]) if size != 1 else Row(values[0],
                                                                              keys[start]))
        start = end
    result = _write(broker, topic, blocks, control)
    h = result.handle
    assert h is not None and result.rows == h.record_count == n
    expected = checksum_of((topic, k, v.encode(), ()) for v, k in zip(ids, keys, strict=True))
    assert h.checksum == expected
    assert sum(s.record_count for s in h.spans) == n
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    assert wait_until_stable(broker.config(), topic, 60)
    report = audit_topic(broker.config(), topic)
    assert report.passed and sorted(report.counts) == sorted(ids), report.summary()
    assert set(report.counts.values()) == {1}


def test_columns_survive_a_full_queue_and_coerce_buffers_in_place(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    """The columnar loop resumes at the right row when produce() refuses one: the producer's
    queue full (100 messages here, so it fills again and again), and a memoryview or bytearray
    value (coerced to bytes, then produced). Every row arrives once; the checksum is the rows'."""
    topic = make_topic(2)
    n = CHUNK + 500
    ids = [f"q-{i}" for i in range(n)]
    values: list[object] = [v.encode() for v in ids]
    for i in (0, 99, 100, CHUNK - 1, CHUNK, n - 1):
        values[i] = memoryview(ids[i].encode()) if i % 2 else bytearray(ids[i].encode())
    config = {**broker.config(), "queue.buffering.max.messages": 100}
    result = write_partition(config, _tid(), [Columns(values)],  # type: ignore[list-item]
                             batch="7", task_partition=3, attempt=1, default_topic=topic,
                             transaction_timeout_ms=60_000, control=control)
    h = result.handle
    assert h is not None and h.record_count == n
    assert h.checksum == checksum_of((topic, None, v.encode(), ()) for v in ids)
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    assert wait_until_stable(broker.config(), topic, 60)
    report = audit_topic(broker.config(), topic)
    assert report.passed and sorted(report.counts) == sorted(ids), report.summary()
    assert set(report.counts.values()) == {1}


def test_an_empty_block_alone_opens_no_transaction(broker: KafkaUnderTest, topic: str,
                                                   control: ControlClient) -> None:
    tid = _tid()
    result = _write(broker, topic, [Columns([]), Columns([], [])], control, tid=tid)
    assert result.kind is ResultKind.EMPTY and result.handle is None
    assert control.describe_transactions([tid])[tid].state is TxnState.UNKNOWN_ID


@pytest.mark.parametrize("bad, reason", [
    pytest.param(None, "value is None", id="null-value"),
    pytest.param(12345, "value is a int", id="int-value"),
    pytest.param(b"x" * 2_000_000, "larger than", id="above-producer-max"),
])
def test_a_bad_row_in_a_block_aborts_everything_and_is_named(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient,
        bad: object, reason: str) -> None:
    topic = make_topic(2)
    first = Columns([f"ok-{i}".encode() for i in range(40)])
    values: list[object] = [f"ok-{i}".encode() for i in range(40, 80)]
    values[7] = bad
    with pytest.raises(RowError, match=reason) as info:
        _write(broker, topic, [first, Columns(values)], control)  # type: ignore[arg-type]
    assert info.value.index == 47
    _nothing_visible(broker, topic)


def test_timestamps_headers_and_explicit_partitions_arrive(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = make_topic(2)
    rows = [Row(b"a", key=b"k", partition=1, headers=(("h", b"x"), ("n", None)),
                timestamp_ms=1_600_000_000_000)]
    h = _write(broker, topic, rows, control).handle
    assert h is not None and [(s.partition, s.record_count) for s in h.spans] == [(1, 1)]
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": _tid(),
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 1, h.spans[0].first_offset)])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
        assert msg is not None and msg.error() is None
        assert msg.timestamp()[1] == 1_600_000_000_000
        assert msg.headers() == [("h", b"x"), ("n", None)]
    finally:
        consumer.close()


def test_no_rows_opens_no_transaction(broker: KafkaUnderTest, topic: str,
                                      control: ControlClient) -> None:
    tid = _tid()
    result = _write(broker, topic, iter(()), control, tid=tid)
    assert result.kind is ResultKind.EMPTY and result.handle is None and result.rows == 0
    assert control.describe_transactions([tid])[tid].state is TxnState.UNKNOWN_ID


@pytest.mark.parametrize("bad", [
    pytest.param({"value": None}, id="none-value"),
    pytest.param(Row(12345), id="int-value"),  # type: ignore[arg-type]
    pytest.param(Row(b"x" * 2_000_000), id="above-producer-max"),
    pytest.param({"value": b"x", "partition": -4}, id="bad-partition"),
])
def test_a_row_that_cannot_be_sent_aborts_everything(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient,
        bad: object) -> None:
    topic = make_topic(2)
    rows = [Row(f"ok-{i}".encode(), key=b"k") for i in range(50)]
    rows.insert(37, bad)  # type: ignore[arg-type]
    with pytest.raises(RowError) as info:
        _write(broker, topic, rows, control)
    assert info.value.index == 37
    _nothing_visible(broker, topic)


def test_a_row_without_a_topic_is_refused(broker: KafkaUnderTest, topic: str,
                                          control: ControlClient) -> None:
    with pytest.raises(RowError, match=r"row 0 .*no topic"):
        write_partition(broker.config(), _tid(), [Row(b"x")], batch="1", task_partition=0,
                        attempt=0, default_topic=None, transaction_timeout_ms=30000,
                        control=control)


def test_a_record_the_broker_refuses_aborts_everything(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    topic = make_topic(1, config={"max.message.bytes": "2048"})
    rows = [Row(f"ok-{i}".encode(), key=f"k{i}".encode()) for i in range(20)]
    rows[13] = Row(b"big-" + b"x" * 8000, key=b"big")
    with pytest.raises(DeliveryError) as info:
        _write(broker, topic, rows, control)
    assert info.value.index == 13 and info.value.key == b"big"
    assert "MSG_SIZE_TOO_LARGE" in str(info.value) or "TOO_LARGE" in info.value.reason
    _nothing_visible(broker, topic)


def test_a_row_for_a_missing_partition_aborts_everything(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    # The writer has the topic's metadata before it produces (it asks for it while starting the
    # transaction), so librdkafka refuses the row at produce() instead of failing its delivery.
    topic = make_topic(2)
    rows = [Row(f"ok-{i}".encode()) for i in range(30)] + [Row(b"lost", partition=9)]
    with pytest.raises(RowError, match="partition 9 does not exist") as info:
        _write(broker, topic, rows, control)
    assert info.value.index == 30
    _nothing_visible(broker, topic)


def test_a_transaction_over_its_budget_fails_fast(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    topic = make_topic(1)

    def slow() -> Iterator[Row]:
        for i in range(5):
            yield Row(f"slow-{i}".encode())
            time.sleep(0.3)

    with pytest.raises(TransactionBudgetExceeded, match="smaller batches"):
        _write(broker, topic, slow(), control, budget_ms=500)
    _nothing_visible(broker, topic)


class _ZombieBeforeDescribe(ControlClient):
    """Runs a real second process on the same transactional id between our flush and our
    DescribeTransactions: a zombie attempt re-initializing the id during the pre-commit."""

    def __init__(self, config: dict[str, str], zombie: Callable[[], None]) -> None:
        super().__init__(config)
        self._zombie: Callable[[], None] | None = zombie

    def describe_transactions(self, ids: Sequence[str]) -> dict[str, TransactionDescription]:
        if self._zombie is not None:
            zombie, self._zombie = self._zombie, None
            zombie()
        return super().describe_transactions(ids)


def test_a_zombie_on_the_same_id_fails_the_task(broker: KafkaUnderTest,
                                                make_topic: Callable[..., str]) -> None:
    topic = make_topic(2)
    tid = _tid()

    def zombie() -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "twopc_testing.txn_producer", "--bootstrap",
             broker.bootstrap_servers, "--topic", topic, "--transactional-id", tid, "--count",
             "1", "--end", "open", "--timeout-ms", "2000", "--id-prefix", "zombie-"],
            capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr

    rows = [Row(f"mine-{i}".encode()) for i in range(40)]
    with (_ZombieBeforeDescribe(broker.config(), zombie) as control,
          pytest.raises(ZombieDetected) as info):
        _write(broker, topic, rows, control, tid=tid)
    assert info.value.coordinator.producer_epoch != -1
    # Ours was aborted by the zombie's fence, the zombie's own transaction times out.
    _nothing_visible(broker, topic)


class _StaleDescribe(ControlClient):
    """Answers the writer's check before init_transactions with the id far from the end (as
    another process moving the id right after the answer would leave it): the writer does not
    rotate, and identify() must refuse what the init then gives."""

    stale_left = 1  # the check before the init; identify's describe gets the real answer

    def start_describe_transactions(self, ids: Sequence[str]
                                    ) -> Future[dict[str, TransactionDescription]]:
        if not self.stale_left:
            return super().start_describe_transactions(ids)
        self.stale_left -= 1
        stale: Future[dict[str, TransactionDescription]] = Future()
        stale.set_result({tid: TransactionDescription(tid, TxnState.EMPTY, 1, 0, 60000, -1, ())
                          for tid in ids})
        return stale


def test_a_transaction_without_release_headroom_is_never_precommitted(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient) -> None:
    """The backstop of the epoch guard (docs/design.md section 8): an init that lands at 32766
    (the id driven to 32765 behind the writer's check) is aborted with EpochWithoutHeadroom, no
    handle; the retry finds the id near the end, rotates its producer id first and pre-commits on
    the new one, with a release's headroom."""
    topic = make_topic(2)
    tid = _tid()
    driven = drive_one(broker.bootstrap_servers, tid, EXHAUSTED - 1)
    rows = [Row(f"edge-{i}".encode()) for i in range(20)]
    with _StaleDescribe(broker.config()) as stale, \
            pytest.raises(EpochWithoutHeadroom) as info:
        _write(broker, topic, rows, stale, tid=tid)
    assert (info.value.producer_id, info.value.epoch) == (driven.producer_id, EXHAUSTED)
    _nothing_visible(broker, topic)
    h = _write(broker, topic, rows, control, tid=tid).handle
    assert h is not None and h.producer_id != driven.producer_id and releasable(h.epoch), h
    control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch, True)])
    assert wait_until_stable(broker.config(), topic, 60)
    report = audit_topic(broker.config(), topic, [f"edge-{i}" for i in range(20)])
    assert report.passed and set(report.counts.values()) == {1}, report.summary()


@pytest.mark.parametrize("point,end", [
    ("writer.after_begin", "timeout"),
    ("writer.after_produce", "timeout"),
    ("writer.after_flush", "fence"),
    ("writer.after_identify", "timeout"),
])
def test_a_writer_killed_at_a_crash_point_leaves_nothing_visible(
        broker: KafkaUnderTest, make_topic: Callable[..., str], control: ControlClient,
        point: str, end: str) -> None:
    topic = make_topic(2)
    tid = _tid()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "executor" / "writer_proc.py"),
         broker.bootstrap_servers, topic, tid, "3000", "2000", "crash-"],
        env={**os.environ, "TWOPC_CRASH_AT": point}, cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""  # it died before returning a handle
    if end == "fence":
        assert control.fence([tid])[tid].fenced
    # Killed right after queueing, its records may not have reached the log at all: then the
    # log is stable at once while the coordinator still holds the transaction until its
    # timeout. Wait (bounded) for the coordinator to end it, then audit.
    deadline = time.monotonic() + 60
    while (control.describe_transactions([tid])[tid].state is TxnState.ONGOING
           and time.monotonic() < deadline):
        time.sleep(0.25)
    assert control.describe_transactions([tid])[tid].state is not TxnState.ONGOING
    _nothing_visible(broker, topic)


def test_the_crash_script_writes_when_not_armed(broker: KafkaUnderTest, topic: str) -> None:
    """The crash tests' process really writes (so a crash test cannot pass vacuously)."""
    env = {k: v for k, v in os.environ.items() if k != "TWOPC_CRASH_AT"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "executor" / "writer_proc.py"),
         broker.bootstrap_servers, topic, _tid(), "300", "10000", "run-"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = WriteResult.from_obj(json.loads(proc.stdout))
    assert result.handle is not None and result.handle.record_count == 300
