"""The executor side: write one task's rows inside one Kafka transaction and pre-commit it.

docs/design.md section 2, executor steps 2-6. `write_partition` returns a `WriteResult` whose handle lets
the driver finish the transaction from another process; the transaction itself is left open.

Rows come as `Row`s, mappings, or `Columns` blocks (value and key columns, from Arrow: no object
per row). The transaction starts in a helper thread while the caller's rows are read ahead, so that
the broker round trips of init_transactions overlap with the caller's conversion work. Only failed
deliveries are reported to Python; where the transaction starts in each partition and how many records
it holds there (the handle's spans) the partition leaders tell once, after the flush: identify.py
checks, from the producer's and the brokers' views, that the handle names this task's own
transaction. The errors a write ends with: write_errors.py.

After the pre-commit the producer is dropped, never closed and never used in a `with` block:
confluent-kafka's `close()` aborts an open transaction, while librdkafka's destroy (what dropping
the last reference runs) sends no EndTxn. tests/executor prove the latter against a real broker.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import chain, repeat
from operator import length_hint
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from twopc.control import ControlClient
from twopc.crashpoints import crash_point
from twopc.executor.checksum import MultisetChecksum, identity_hashes, record_hashes
from twopc.executor.identify import Statistics, identify
from twopc.executor.producer import (
    NO_ROW,
    Deliveries,
    Failure,
    SecurityErrors,
    Starter,
    build_off_thread,
    read_ahead,
    transactional_producer_config,
)
from twopc.executor.rows import (
    Columns,
    Row,
    check_partition,
    check_value,
    encode_headers,
    fields_of,
    produce_headers,
)
from twopc.executor.write_errors import (
    BrokerSecurityError,
    DeliveryError,
    EpochWithoutHeadroom,
    IdentificationError,
    ProducerError,
    RowError,
    SpanError,
    TransactionBudgetExceeded,
    WriteError,
    WriterConfigError,
    ZombieDetected,
)
from twopc.protocol.handle import Handle, ResultKind, WriteResult

__all__ = [
    "BrokerSecurityError",
    "Columns",
    "DeliveryError",
    "EpochWithoutHeadroom",
    "IdentificationError",
    "ProducerError",
    "Row",
    "RowError",
    "SpanError",
    "TransactionBudgetExceeded",
    "WriteError",
    "WriterConfigError",
    "ZombieDetected",
    "budget_limit_ms",
    "transactional_producer_config",
    "write_partition",
]

log = logging.getLogger("twopc.writer")

CHUNK = 4096  # rows between checksum chunks, delivery-report polls and budget checks
MIN_MARGIN_MS = 500
_NO_TOPIC = ("the row names no topic and the writer has no default topic: set the topic option "
             "or a topic column")


def budget_limit_ms(transaction_timeout_ms: int, budget_ms: int | None) -> int:
    """How long a transaction may stay open while writing: the budget, and in any case the
    timeout minus a margin that leaves the driver time to commit before the coordinator aborts."""
    margin = max(MIN_MARGIN_MS, transaction_timeout_ms // 5)
    limit = transaction_timeout_ms - margin
    return limit if budget_ms is None else min(limit, budget_ms)


def write_partition(
    producer_config: Mapping[str, Any],
    transactional_id: str,
    rows: Iterable[Row | Mapping[str, Any] | Columns],
    *,
    batch: str,
    task_partition: int,
    attempt: int,
    default_topic: str | None,
    transaction_timeout_ms: int,
    budget_ms: int | None = None,
    control: ControlClient | None = None,
) -> WriteResult:
    """Write `rows` in one transaction under `transactional_id` and pre-commit it (module doc)."""
    config = transactional_producer_config(producer_config, transactional_id,
                                           transaction_timeout_ms)
    limit_ms = budget_limit_ms(transaction_timeout_ms, budget_ms)
    if limit_ms <= 0:
        raise WriterConfigError(
            f"transaction.timeout.ms={transaction_timeout_ms} with budget_ms={budget_ms} leaves no "
            "time to write: raise transaction.timeout.ms")
    iterator = iter(rows)
    first = next(iterator, NO_ROW)
    while type(first) is Columns and not len(first):
        first = next(iterator, NO_ROW)
    if first is NO_ROW:
        # No transaction at all: one with no partition stays Empty and EndTxn on it fails.
        return WriteResult(ResultKind.EMPTY, batch, task_partition, attempt)
    ctl = control if control is not None else ControlClient(producer_config)
    try:
        txn = _Transaction(config, transactional_id, limit_ms, budget_ms, transaction_timeout_ms)
        rest: Iterable[Any] = chain((first,), iterator)
        handle = txn.run(rest, default_topic, ctl, task_partition, attempt)
        # `txn` (and its producer) is dropped here without close(): the transaction stays open.
        return WriteResult(ResultKind.PRECOMMITTED, batch, task_partition, attempt, handle,
                           handle.record_count)
    finally:
        if control is None:
            ctl.close()


class _Transaction:
    def __init__(self, config: dict[str, Any], transactional_id: str, limit_ms: int,
                 budget_ms: int | None, timeout_ms: int) -> None:
        self.tid = transactional_id
        self.limit_ms = limit_ms
        self.budget_ms = budget_ms
        self.timeout_ms = timeout_ms
        self.stats = Statistics(int(config["statistics.interval.ms"]), config.get("stats_cb"))
        self.deliveries = Deliveries()
        self.checksum = MultisetChecksum()
        self.identities: list[Any] = []  # per chunk, the rows' identity hashes (uint64 arrays)
        self.rows = 0
        self.security = SecurityErrors(config)
        config = {**config, "stats_cb": self.stats.on_stats, "on_delivery": self.deliveries.on_delivery,
                  "delivery.report.only.error": True, "error_cb": self.security.on_error}
        # With an oauth_cb the constructor waits >= 1 s for the first token: then it is built
        # on the Starter's thread, overlapping the caller's rows (producer.build_off_thread).
        self.config = config
        self._built = None if build_off_thread(config) else Producer(config)
        self.producer: Any = self._built  # the Starter's once it has run (None until then)
        self.begun_at = 0.0

    # --- the steps ---------------------------------------------------------------------------

    def run(self, rows: Iterable[Row | Mapping[str, Any] | Columns], default_topic: str | None,
            control: ControlClient, task_partition: int, attempt: int) -> Handle:
        iterator = iter(rows)
        # Starting takes a broker round trip or three; the caller's rows (often converted from
        # Arrow on the fly) are read ahead meanwhile. Nothing is produced before the begin.
        starter = Starter(self._built, default_topic, self.timeout_ms / 1000, self.security,
                           self.tid, control, self.config)
        try:
            ahead = read_ahead(iterator, starter)
        except BaseException:
            starter.join()
            self.producer = starter.producer
            if starter.error is None:
                self._abort()  # begun, nothing produced: ends locally, nothing to see
            raise
        starter.join()
        self.producer = starter.producer
        if starter.error is not None:
            exc = starter.error
            if not isinstance(exc, KafkaException):
                raise exc
            raise ProducerError(f"transactional id {self.tid!r}: could not start a transaction: "
                                f"{exc.args[0] if exc.args else exc}") from exc
        # The coordinator starts its clock at the first partition, after this: conservative.
        self.begun_at = time.monotonic()
        try:
            crash_point("writer.after_begin")
            self._produce_all(chain(ahead, iterator), default_topic)
            crash_point("writer.after_produce")
            self._flush()
            crash_point("writer.after_flush")
            handle = identify(control, self.tid, self.stats.eos_after_flush(self.producer, self.tid),
                              rows=self.rows, checksum=self.checksum.hexdigest(),
                              task_partition=task_partition, attempt=attempt,
                              begun_at=self.begun_at)
        except ZombieDetected:
            # No abort: librdkafka's abort may bump the epoch with InitProducerId (KIP-360),
            # and InitProducerId on this id aborts whatever transaction is open there, which is
            # now the other process's (possibly the attempt the driver will commit). Ours was
            # aborted by the fence that re-initialized the id, or will time out; the driver's
            # recovery fences open transactions no record names. Nothing here is committed.
            raise
        except IdentificationError:
            raise  # same reasoning: without our own view we cannot tell whose transaction it is
        except KafkaException as exc:
            self._abort()
            raise ProducerError(f"transactional id {self.tid!r}: {exc.args[0] if exc.args else exc}"
                                "; the transaction was aborted") from exc
        except BaseException:
            self._abort()
            raise
        crash_point("writer.after_identify")
        return handle

    def _produce_all(self, rows: Iterable[Row | Mapping[str, Any] | Columns],
                     default_topic: str | None) -> None:
        produce = self.producer.produce
        values: list[Any] = []
        keys: list[Any] = []
        overrides: list[tuple[int, str]] = []
        headers: list[tuple[int, bytes]] = []
        add_value = values.append
        add_key = keys.append
        index = 0
        for row in rows:
            if type(row) is Row:
                value, key, topic, partition = row.value, row.key, row.topic, row.partition
                hdrs = produce_headers(row.headers, index, key) if row.headers else None
                ts = row.timestamp_ms or 0
                if partition is None:
                    partition = -1
                elif type(partition) is not int or partition < 0:
                    check_partition(index, partition, key)
            elif type(row) is Columns:
                self._add_chunk(default_topic, values, keys, overrides, headers)
                index = self._produce_columns(row, index, default_topic)
                continue
            elif isinstance(row, Mapping):
                value, key, topic, partition, hdrs, ts = fields_of(row, index)
                if partition != -1:
                    check_partition(index, partition, key)
            else:
                raise RowError(index, None, f"a row is a twopc Row, Columns or a mapping, not a "
                               f"{type(row).__name__}")
            if value is None:
                check_value(index, value, key)
            pos = len(values)
            if topic is None:
                if default_topic is None:
                    raise RowError(index, key, _NO_TOPIC)
                topic = default_topic
            else:
                overrides.append((pos, topic))
            try:
                # Positional: confluent-kafka 2.16 takes (topic, value, key, partition, callback,
                # on_delivery, timestamp, headers); keywords cost more per row.
                produce(topic, value, key, partition, None, None, ts, hdrs)
            except BufferError:
                self._produce_when_room((topic, value, key, partition, None, None, ts, hdrs))
            except (TypeError, ValueError, KafkaException) as exc:
                value, key = self._produce_refused(exc, index, topic, value, key, partition, ts,
                                                   hdrs)
            add_value(value)
            add_key(key)
            if hdrs:
                headers.append((pos, encode_headers(hdrs)))
            index += 1
            if pos + 1 == CHUNK:
                self._end_chunk(default_topic, values, keys, overrides, headers)
        self._add_chunk(default_topic, values, keys, overrides, headers)
        self.rows = index

    def _produce_columns(self, block: Columns, start: int, default_topic: str | None) -> int:
        """The columnar path: the same records, checks and chunking as the equivalent `Row`s
        (value, key, default topic), without a per-row object or branch. Returns the next index."""
        values: list[Any] = list(block.values)  # our own copies: a coerced buffer replaces its entry
        n = len(values)
        keys: list[Any] = [None] * n if block.keys is None else list(block.keys)
        if not n:
            return start
        if default_topic is None:
            raise RowError(start, keys[0], _NO_TOPIC)
        if None in values:
            at = values.index(None)
            check_value(start + at, None, keys[at])
        produce = self.producer.produce
        topic = default_topic
        for lo in range(0, n, CHUNK):
            hi = min(lo + CHUNK, n)
            i = lo
            while i < hi:
                # map() calls produce from C, without a bytecode loop (~15% of the loop's CPU).
                # It takes one item of each iterator before each call, so when a call raises,
                # the items not yet taken say which row it was.
                pending = iter(values[i:hi])
                try:
                    deque(map(produce, repeat(topic), pending, iter(keys[i:hi])), maxlen=0)
                    i = hi
                    continue
                except BufferError:
                    i = hi - length_hint(pending) - 1
                    self._produce_when_room((topic, values[i], keys[i], -1, None, None, 0, None))
                except (TypeError, ValueError, KafkaException) as exc:
                    i = hi - length_hint(pending) - 1
                    values[i], keys[i] = self._produce_refused(exc, start + i, topic, values[i],
                                                               keys[i], -1, 0, None)
                i += 1
            self._end_chunk(default_topic, values[lo:hi], keys[lo:hi], [], [])
        return start + n

    def _end_chunk(self, default_topic: str | None, values: list[Any], keys: list[Any],
                   overrides: list[tuple[int, str]], headers: list[tuple[int, bytes]]) -> None:
        self._add_chunk(default_topic, values, keys, overrides, headers)
        self.producer.poll(0)
        if self.deliveries.failures:
            raise self._delivery_error()
        self._check_budget("while producing")

    def _add_chunk(self, default_topic: str | None, values: list[Any], keys: list[Any],
                   overrides: list[tuple[int, str]], headers: list[tuple[int, bytes]]) -> None:
        if values:
            ids = identity_hashes(default_topic or "", values, keys, overrides)
            self.identities.append(ids)
            self.checksum.add_hashes(record_hashes(ids, headers))
        values.clear()
        keys.clear()
        overrides.clear()
        headers.clear()

    def _produce_when_room(self, args: tuple[Any, ...]) -> None:
        while True:
            self.producer.poll(0.05)  # serves delivery reports, which frees the queue
            if self.deliveries.failures:
                raise self._delivery_error()
            self._check_budget("while producing (the producer queue was full)")
            try:
                self.producer.produce(*args)
                return
            except BufferError:
                continue

    def _produce_refused(self, exc: Exception, index: int, topic: str, value: Any, key: Any,
                         partition: int, ts: int, hdrs: Any) -> tuple[Any, Any]:
        """The slow path of a row produce() refused: coerce buffers to bytes, or raise RowError."""
        if isinstance(exc, KafkaException):
            err = exc.args[0]
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise RowError(index, key, f"the record ({_size(value)} bytes) is larger than "
                               "the producer's message.max.bytes: split it, or raise "
                               "message.max.bytes here and max.message.bytes on the topic") \
                    from exc
            if err.code() == KafkaError._UNKNOWN_PARTITION:
                raise RowError(index, key, f"partition {partition} does not exist in topic "
                               f"{topic!r} (librdkafka: {err.str()})") from exc
            raise RowError(index, key, f"the producer refused it: {err.name()}: {err.str()}") \
                from exc
        coerced_value = bytes(value) if isinstance(value, (bytearray, memoryview)) else value
        coerced_key = bytes(key) if isinstance(key, (bytearray, memoryview)) else key
        if coerced_value is value and coerced_key is key:
            check_value(index, value, key)
            if key is not None and not isinstance(key, (bytes, str)):
                raise RowError(index, key, f"the key is a {type(key).__name__}; give bytes, str "
                               "or None")
            if not isinstance(topic, str):
                raise RowError(index, key, f"the topic {topic!r} is not a str")
            raise RowError(index, key, f"confluent-kafka refused it: {exc}") from exc
        args = (topic, coerced_value, coerced_key, partition, None, None, ts, hdrs)
        try:
            self.producer.produce(*args)
        except BufferError:
            self._produce_when_room(args)
        except (TypeError, ValueError, KafkaException) as again:
            return self._produce_refused(again, index, topic, coerced_value, coerced_key,
                                         partition, ts, hdrs)
        return coerced_value, coerced_key

    def _flush(self) -> None:
        while True:
            remaining_s = self.limit_ms / 1000 - (time.monotonic() - self.begun_at)
            if remaining_s <= 0:
                self._check_budget("while flushing")
            left = self.producer.flush(min(max(remaining_s, 0.001), 1.0))
            if self.deliveries.failures:
                raise self._delivery_error()
            if left == 0:
                break
        self._check_budget("after the flush")

    # --- failure paths -------------------------------------------------------------------------

    def _check_budget(self, when: str) -> None:
        elapsed_ms = (time.monotonic() - self.begun_at) * 1000
        if elapsed_ms <= self.limit_ms:
            return
        budget = "" if self.budget_ms is None else f"budget_ms={self.budget_ms}, "
        raise TransactionBudgetExceeded(
            f"transaction {self.tid!r} has been open {elapsed_ms:.0f} ms {when}, after "
            f"{self.rows or 'some'} rows; its limit is {self.limit_ms} ms ({budget}"
            f"transaction.timeout.ms={self.timeout_ms} minus a margin for the commit). It was "
            "aborted before the coordinator could time it out. Write smaller batches (e.g. "
            "maxOffsetsPerTrigger, more partitions) or raise transaction.timeout.ms (up to the "
            "broker's transaction.max.timeout.ms)")

    def _delivery_error(self) -> DeliveryError:
        failures = self.deliveries.failures
        too_large = [f for f in failures if f.error.code() == KafkaError.MSG_SIZE_TOO_LARGE]
        # A broker rejects a whole batch for one oversized record: name the largest one.
        worst = max(too_large, key=lambda f: len(f.value or b"")) if too_large else failures[0]
        reason = f"{worst.error.name()}: {worst.error.str()}"
        if too_large:
            reason += (f" (the record is {len(worst.value or b'')} bytes: raise the topic's "
                       "max.message.bytes or write smaller records)")
        return DeliveryError(self._locate(worst), worst.key, worst.topic, worst.partition,
                             reason, self.deliveries.failed)

    def _locate(self, failure: Failure) -> int | None:
        """The index of the first row with the failed record's topic, key and value."""
        if failure.value is None or failure.topic is None or not self.identities:
            return None
        import numpy as np

        target = identity_hashes(failure.topic, [failure.value], [failure.key])[0]
        found = np.flatnonzero(np.concatenate(self.identities) == target)
        return int(found[0]) if len(found) else None

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(self.timeout_ms / 1000)
        except KafkaException as exc:
            log.warning("could not abort transaction %r (%s); it stays invisible and the "
                        "coordinator aborts it after transaction.timeout.ms=%d", self.tid,
                        exc.args[0] if exc.args else exc, self.timeout_ms)


def _size(value: Any) -> int:
    return len(value.encode()) if isinstance(value, str) else len(value)
