"""Requests to partition leaders: Fetch at one offset, last stable offsets, producer states, and the
log check built on them (docs/design.md section 4, pass 2; section 8).

Functions over one `Cluster`, run on the control client's event loop; `ControlClient` is their
synchronous face. A partition whose leader moved or cannot be reached is asked again within the
retry settings.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from twopc.control import errors as e
from twopc.control import partition_messages as pm
from twopc.control.cluster import Backoff, Cluster
from twopc.control.errors import BrokerConnectionError, KafkaApiError
from twopc.control.logcheck import (
    FetchProbe,
    LogCheckRequest,
    LogCheckResult,
    LogOutcome,
    RangeAnswer,
    UnknownReason,
    decide,
    decide_spans,
)
from twopc.control.messages import ISOLATION_READ_COMMITTED, ISOLATION_READ_UNCOMMITTED, ApiKey
from twopc.control.readback import ReadProblem, Scan, SpanRecords
from twopc.control.record_batches import batch_headers
from twopc.control.record_decode import decode_batches

T = TypeVar("T")
# Small on purpose: the broker still returns the whole first batch (KIP-74), and only its header
# is read.
PROBE_MAX_BYTES = 1024
# A log check's fetch covers every span of the partition from the lowest up: this many bytes
# reach the transactions of a commit of small ones in one answer (bench_endtxn.py: 64 of a few
# records over 8 partitions), and a larger first batch still comes whole (KIP-74); spans past
# the answer are fetched again from there, so the limit changes the cost, never a verdict.
SPANS_MAX_BYTES = 64 * 1024


_Answer = tuple[int, pm.FetchPartition | None]


class FetchBatcher:
    """Fetches of many partitions asked in one turn of the event loop leave as one Fetch request
    per leader (and per topic addressing: by id or by name). Each caller still gets its own
    partition's answer, or the request's failure, and retries as `fetch_raw` does."""

    def __init__(self, cluster: Cluster, isolation: int = ISOLATION_READ_COMMITTED) -> None:
        self._cluster = cluster
        self._isolation = isolation
        self._queue: dict[tuple[int, bool], list[tuple[
            str, uuid.UUID | None, int, int, int, asyncio.Future[_Answer]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def fetch(self, node: int, topic: str, partition: int, offset: int,
                    topic_id: uuid.UUID | None, max_bytes: int) -> _Answer:
        loop = asyncio.get_running_loop()
        if not self._queue:
            loop.call_soon(self._flush)
        future: asyncio.Future[_Answer] = loop.create_future()
        self._queue.setdefault((node, topic_id is not None), []).append(
            (topic, topic_id, partition, offset, max_bytes, future))
        return await future

    def _flush(self) -> None:
        queue, self._queue = self._queue, {}
        for (node, by_id), waiting in queue.items():
            task = asyncio.get_running_loop().create_task(self._send(node, by_id, waiting))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)

    async def _send(self, node: int, by_id: bool, waiting: list[tuple[
            str, uuid.UUID | None, int, int, int, asyncio.Future[_Answer]]]) -> None:
        try:
            conn = await self._cluster.connection(node)
            version = conn.version(ApiKey.FETCH, None if by_id else 12)
            targets = [pm.FetchTarget(tid if version >= 13 and tid else topic, partition, offset,
                                      max_bytes)
                       for topic, tid, partition, offset, max_bytes, _ in waiting]
            body = pm.encode_fetch_many(version, targets, sum(t.max_bytes for t in targets),
                                        isolation=self._isolation)
            top, parts = pm.decode_fetch_many(version, await conn.request(ApiKey.FETCH, version,
                                                                          body))
        except BaseException as exc:  # every partition of the request sees its failure
            for *_, future in waiting:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):  # cancelled: its callers are told, then it ends
                raise
            return
        answers = {(topic, p.partition): p for topic, p in parts}
        for target, (*_, future) in zip(targets, waiting, strict=True):
            if future.done():  # its caller was cancelled
                continue
            p = answers.get((target.topic, target.partition))
            if top != 0:
                future.set_result((top, p))
            elif p is None:  # not answered: asked again, as a request lost
                future.set_result((e.ERROR_CODES["NETWORK_EXCEPTION"], None))
            else:
                future.set_result((p.error_code, p))


async def fetch_raw(cluster: Cluster, topic: str, partition: int, offset: int,
                    topic_id: uuid.UUID | None, max_bytes: int,
                    isolation: int = ISOLATION_READ_COMMITTED, budget_s: float | None = None,
                    via: FetchBatcher | None = None) -> tuple[int, pm.FetchPartition | None]:
    """One fetch of one partition at `offset` from its leader, asked again while the leader
    moves or cannot be reached (within `budget_s`, else the retry settings): (error code, the
    partition's answer). With `via`, the request is shared with the other partitions of that
    leader asked at the same moment."""
    backoff = Backoff(cluster.settings, budget_s)
    while True:
        node: int | None = None
        try:
            node = await cluster.leader(topic, partition)
            if via is not None:
                code, p = await via.fetch(node, topic, partition, offset, topic_id, max_bytes)
                parts = [p] if p is not None else []
            else:
                conn = await cluster.connection(node)
                version = conn.version(ApiKey.FETCH, None if topic_id else 12)
                target: str | uuid.UUID = topic_id if version >= 13 and topic_id else topic
                body = pm.encode_fetch(version, target, partition, offset, max_bytes,
                                       isolation=isolation)
                top, parts = pm.decode_fetch(version, await conn.request(ApiKey.FETCH, version,
                                                                         body))
                code = top if top != 0 else (parts[0].error_code if parts else 0)
        except BrokerConnectionError:
            cluster.forget_leader(topic, partition)
            if node is not None:
                cluster.drop_node(node)
            code, parts = e.ERROR_CODES["NETWORK_EXCEPTION"], []
        except KafkaApiError as exc:  # no leader now: asked again within the budget
            if exc.code not in e.LEADER_RETRIABLE:
                raise
            code, parts = exc.code, []
        if code in e.LEADER_RETRIABLE or code == e.ERROR_CODES["NETWORK_EXCEPTION"]:
            cluster.forget_leader(topic, partition)
            if await backoff.wait():
                continue
        return code, parts[0] if parts else None


async def fetch_at(cluster: Cluster, topic: str, partition: int, offset: int,
                   topic_id: uuid.UUID | None, budget_s: float | None = None) -> FetchProbe:
    code, p = await fetch_raw(cluster, topic, partition, offset, topic_id, PROBE_MAX_BYTES,
                              budget_s=budget_s)
    headers = batch_headers(p.records) if p is not None and p.records else []
    lso = p.last_stable_offset if p else -1
    hw = p.high_watermark if p else -1
    log_start = p.log_start_offset if p else -1
    if code == e.ERROR_CODES["OFFSET_OUT_OF_RANGE"]:
        # An out-of-range answer carries no offsets: ask where the log starts and ends.
        log_start = await list_offset(cluster, topic, partition, pm.EARLIEST)
        hw = await list_offset(cluster, topic, partition, pm.LATEST)
    return FetchProbe(
        topic, partition, offset, None if code == 0 else e.error_name(code), lso, hw,
        log_start, tuple(p.aborted_transactions or ()) if p else (),
        headers[0] if headers else None)


async def list_offset(cluster: Cluster, topic: str, partition: int, timestamp: int) -> int:
    conn = await cluster.connection(await cluster.leader(topic, partition))
    version = conn.version(ApiKey.LIST_OFFSETS)
    code, offset = pm.decode_list_offsets(version, await conn.request(
        ApiKey.LIST_OFFSETS, version,
        pm.encode_list_offsets(version, topic, partition, timestamp)))
    return offset if code == 0 else -1


async def wait_stable(cluster: Cluster, past: dict[tuple[str, int], int], within_s: float
                       ) -> dict[tuple[str, int], int]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    # A partition without a reachable leader is retried for a second at most here: the caller
    # judges what it could not read (it never counts as stable).
    budget = within_s + 1.0
    lso = await last_stable(cluster, sorted(past), budget)
    delay = 0.001
    while True:
        waiting = sorted(tp for tp, offset in past.items()
                         if tp not in lso or lso[tp] <= offset)
        elapsed = loop.time() - start
        if not waiting or elapsed + delay > within_s:
            return lso
        await asyncio.sleep(delay)
        # Markers usually land within 10 ms: ask often until then (a ListOffsets is cheap).
        delay = delay if elapsed < 0.01 else min(delay * 2, 0.008)
        lso.update(await last_stable(cluster, waiting, budget))


async def last_stable(cluster: Cluster, partitions: list[tuple[str, int]],
                      budget_s: float | None = None) -> dict[tuple[str, int], int]:
    answers = await by_leader(cluster, partitions, ApiKey.LIST_OFFSETS,
                              pm.encode_list_offsets_latest, pm.decode_list_offsets_all, budget_s)
    return {tp: offset for tp, (code, offset) in answers.items()
            if code == 0 and offset is not None}


async def high_watermarks(cluster: Cluster, partitions: list[tuple[str, int]],
                          budget_s: float | None = None) -> dict[tuple[str, int], int]:
    def encode(version: int, tps: list[tuple[str, int]]) -> bytes:
        return pm.encode_list_offsets_latest(version, tps, ISOLATION_READ_UNCOMMITTED)

    answers = await by_leader(cluster, partitions, ApiKey.LIST_OFFSETS, encode,
                              pm.decode_list_offsets_all, budget_s)
    return {tp: offset for tp, (code, offset) in answers.items()
            if code == 0 and offset is not None}


async def by_leader(cluster: Cluster, partitions: list[tuple[str, int]], api: ApiKey,
                     encode: Callable[[int, list[tuple[str, int]]], bytes],
                     decode: Callable[[int, Any], Mapping[tuple[str, int], tuple[int, T]]],
                     budget_s: float | None = None,
                     ) -> dict[tuple[str, int], tuple[int, T | None]]:
    """Ask each partition's leader, one request per leader. A partition whose leader moved or
    could not be reached is asked again (within the retry settings); each partition gets its
    last (error code, answer), the answer None when no leader answered for it."""
    out: dict[tuple[str, int], tuple[int, T | None]] = {}
    todo = partitions
    backoff = Backoff(cluster.settings, budget_s)
    network = e.ERROR_CODES["NETWORK_EXCEPTION"]
    while todo:
        by_node: dict[int, list[tuple[str, int]]] = {}
        retry: list[tuple[str, int]] = []
        for tp in todo:
            try:
                by_node.setdefault(await cluster.leader(*tp), []).append(tp)
            except KafkaApiError as exc:  # no leader now (or no such partition)
                out[tp] = (exc.code, None)
                if exc.code in e.LEADER_RETRIABLE:
                    cluster.forget_leader(*tp)
                    retry.append(tp)
        for node, tps in by_node.items():
            answers: Mapping[tuple[str, int], tuple[int, T]]
            try:
                conn = await cluster.connection(node)
                version = conn.version(api)
                answers = decode(version, await conn.request(api, version, encode(version, tps)))
            except BrokerConnectionError:
                cluster.drop_node(node)
                answers = {}
            for tp in tps:
                code, answer = answers.get(tp, (network, None))
                out[tp] = (code, answer)
                if code in e.LEADER_RETRIABLE or code == network:
                    cluster.forget_leader(*tp)
                    retry.append(tp)
        todo = retry
        if todo and not await backoff.wait():
            break
    return out


async def current_topic_ids(cluster: Cluster, topics: Iterable[str]) -> dict[str, str | None]:
    """Each topic's id now, from one Metadata request (None: the topic is gone)."""
    wanted = sorted(set(topics))
    resp = await cluster.refresh_metadata(wanted)
    now: dict[str, str | None] = dict.fromkeys(wanted)
    for t in resp.topics:
        if t.name in now and t.error_code == 0:
            now[t.name] = str(t.topic_id)
    return now


def topic_changed(recorded: str, now: str | None) -> str | None:
    """What a span's recorded topic id meets now, said for the operator; None: the same topic."""
    return None if now == recorded else f"recorded topic id {recorded}, now {now or 'gone'}"


async def log_check(cluster: Cluster, topic: str, partition: int, offset: int, producer_id: int,
                    epoch: int, topic_id: str | None,
                    budget_s: float | None = None) -> LogCheckResult:
    now = None if topic_id is None else (await current_topic_ids(cluster, [topic]))[topic]
    return await log_check_seen(cluster, topic, partition, offset, producer_id, epoch, topic_id,
                                now, budget_s)


async def log_check_seen(cluster: Cluster, topic: str, partition: int, offset: int,
                         producer_id: int, epoch: int, topic_id: str | None,
                         topic_now: str | None, budget_s: float | None = None) -> LogCheckResult:
    """`log_check` with the topic's id now (`topic_now`) already read: the checks of many spans
    share one Metadata request."""
    if topic_id is not None:
        changed = topic_changed(topic_id, topic_now)
        if changed is not None:
            return LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.TOPIC_CHANGED, changed)
    probe = await fetch_at(cluster, topic, partition, offset,
                           uuid.UUID(topic_id) if topic_id else None, budget_s)
    return decide(probe, producer_id, epoch)


def _failed(exc: Exception) -> LogCheckResult:
    return LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR,
                          f"{type(exc).__name__}: {exc}"[:500])


async def log_checks(cluster: Cluster, checks: Sequence[LogCheckRequest],
                     budget_s: float | None = None) -> list[LogCheckResult]:
    """`log_check` of every span, answers in the order asked: one fetch per partition answers
    every span its returned batches reach (`logcheck.decide_spans`), from the lowest span up,
    and the partitions of one leader share each Fetch request."""
    # The recorded topic ids are checked against one Metadata request for all the spans (one per
    # span cost a whole metadata answer each: 2 per transaction in a recovery of 3,000). Each
    # fetch still names the topic id, so a topic re-created after this read answers
    # UNKNOWN_TOPIC_ID there.
    named = {c.topic for c in checks if c.topic_id is not None}
    try:
        now = await current_topic_ids(cluster, named) if named else {}
    except e.ControlError as exc:
        return [_failed(exc) for _ in checks]
    out: list[LogCheckResult | None] = [None] * len(checks)
    by_partition: dict[tuple[str, int, str | None], list[int]] = {}
    for i, c in enumerate(checks):
        changed = None if c.topic_id is None else topic_changed(c.topic_id, now.get(c.topic))
        if changed is not None:
            out[i] = LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.TOPIC_CHANGED, changed)
        else:
            by_partition.setdefault((c.topic, c.partition, c.topic_id), []).append(i)
    batcher = FetchBatcher(cluster)

    spread = asyncio.Semaphore(64)

    async def partition(topic: str, index: int, topic_id: str | None, asked: list[int]) -> None:
        tid = uuid.UUID(topic_id) if topic_id else None
        pending = sorted(asked, key=lambda i: checks[i].offset)
        shared = [True]  # this partition's lowest fetch still goes in the leader's request

        async def ranged(at: int, lowest: bool) -> RangeAnswer | None:
            """The answer of a fetch from `at`; None: out of range."""
            while True:
                via = batcher if lowest and shared[0] else None
                try:
                    if via is None:
                        async with spread:
                            code, p = await fetch_raw(cluster, topic, index, at, tid,
                                                      SPANS_MAX_BYTES, budget_s=budget_s)
                    else:
                        code, p = await fetch_raw(cluster, topic, index, at, tid,
                                                  SPANS_MAX_BYTES, budget_s=budget_s, via=via)
                except e.ControlError:
                    if via is None:
                        raise
                    # A shared request that failed as a whole (an answer that cannot be read)
                    # is no verdict on this partition: asked alone, its own answer counts.
                    shared[0] = False
                    continue
                if code == e.ERROR_CODES["OFFSET_OUT_OF_RANGE"]:
                    return None
                headers = tuple(batch_headers(p.records)) if p is not None and p.records else ()
                if (via is not None and code == 0 and p is not None and not headers
                        and at < p.last_stable_offset):
                    # Sharing a request, a partition gets nothing when its first batch does not
                    # fit in what the earlier partitions left (ReplicaManager: only the first
                    # partition with data gets a batch larger than its limit): alone, it does.
                    shared[0] = False
                    continue
                return RangeAnswer(
                    topic, index, at, None if code == 0 else e.error_name(code),
                    p.last_stable_offset if p else -1, p.high_watermark if p else -1,
                    p.log_start_offset if p else -1,
                    tuple(p.aborted_transactions or ()) if p else (), headers)

        stride = 0
        try:
            while pending:
                # Spans far apart (large transactions) are not reached by one answer: once the
                # first answer shows how many it reaches, later rounds also fetch from every
                # stride-th span at once, as many fetches as before in flight.
                starts = pending[:1] if stride == 0 else pending[::stride][:16]
                got = await asyncio.gather(
                    *(ranged(checks[i].offset, k == 0) for k, i in enumerate(starts)),
                    return_exceptions=True)
                for r in got:
                    if isinstance(r, BaseException) and (
                            r is got[0] or not isinstance(r, e.ControlError)):
                        raise r
                answers = [r for r in got if not isinstance(r, BaseException)]
                if any(r is None for r in answers):
                    # Below the log start or past its end: each span asked alone, as ever.
                    for i in pending:
                        c = checks[i]
                        try:
                            out[i] = await log_check_seen(cluster, topic, index, c.offset,
                                                          c.producer_id, c.epoch, topic_id,
                                                          topic_id, budget_s)
                        except e.ControlError as exc:
                            out[i] = _failed(exc)
                    return
                for k, answer in enumerate(r for r in answers if r is not None):
                    here = [i for i in pending if checks[i].offset >= answer.fetch_offset]
                    verdicts = decide_spans(answer, [(checks[i].offset, checks[i].producer_id,
                                                      checks[i].epoch) for i in here])
                    reached = 0
                    for i, verdict in zip(here, verdicts, strict=True):
                        if verdict is not None:
                            out[i] = verdict
                            reached += 1
                    if k == 0:
                        stride = max(reached, 1)
                    pending = [i for i in pending if out[i] is None]
        except e.ControlError as exc:  # this partition's spans are unknown; the others count
            for i in pending:
                out[i] = _failed(exc)

    await asyncio.gather(*(partition(t, p, tid, asked)
                           for (t, p, tid), asked in by_partition.items()))
    return [r if r is not None else LogCheckResult(
        LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR, "not answered") for r in out]


async def describe_producers(cluster: Cluster, partitions: list[tuple[str, int]],
                             budget_s: float | None = None
                             ) -> dict[tuple[str, int], pm.ProducerState]:
    def decode(version: int, r: Any) -> dict[tuple[str, int], tuple[int, pm.ProducerState]]:
        return {(s.topic, s.partition): (s.error_code, s)
                for s in pm.decode_describe_producers(version, r)}

    answers = await by_leader(cluster, partitions, ApiKey.DESCRIBE_PRODUCERS,
                              pm.encode_describe_producers, decode, budget_s)
    return {tp: state if state is not None else pm.ProducerState(*tp, code, None, ())
            for tp, (code, state) in answers.items()}


# A read-back fetch's byte limit: a few hundred records a round trip, and the broker still returns
# a larger first batch whole (KIP-74).
READ_MAX_BYTES = 1 << 20


async def read_transaction(cluster: Cluster, topic: str, partition: int, first_offset: int,
                           producer_id: int, epoch: int, topic_id: str | None, expected: int,
                           max_bytes: int = READ_MAX_BYTES) -> SpanRecords:
    """The records of (`producer_id`, `epoch`)'s transaction in one partition, from
    `first_offset` to its marker, fetched at read_uncommitted (readback.py decides)."""
    if topic_id is not None:
        changed = topic_changed(topic_id, (await current_topic_ids(cluster, [topic]))[topic])
        if changed is not None:
            return SpanRecords(topic, partition, first_offset, problem=ReadProblem.TOPIC_CHANGED,
                               detail=changed)
    scan = Scan(topic, partition, first_offset, producer_id, epoch, expected)
    tid = uuid.UUID(topic_id) if topic_id else None
    while not scan.done:
        code, p = await fetch_raw(cluster, topic, partition, scan.next_offset, tid, max_bytes,
                                  ISOLATION_READ_UNCOMMITTED)
        if code == e.ERROR_CODES["OFFSET_OUT_OF_RANGE"]:
            log_start = await list_offset(cluster, topic, partition, pm.EARLIEST)
            if 0 <= first_offset < log_start:
                scan.stop(ReadProblem.BELOW_LOG_START,
                          f"offset {first_offset} < log start {log_start}")
            else:
                hw = await list_offset(cluster, topic, partition, pm.LATEST)
                scan.stop(ReadProblem.NO_MARKER if scan.records else ReadProblem.NO_BATCH,
                          f"offset {scan.next_offset} out of range (log start {log_start}, "
                          f"high watermark {hw})")
            break
        if code in (e.ERROR_CODES["UNKNOWN_TOPIC_ID"], e.ERROR_CODES["INCONSISTENT_TOPIC_ID"]):
            scan.stop(ReadProblem.TOPIC_CHANGED, e.error_name(code))
            break
        if code != 0 or p is None:
            scan.stop(ReadProblem.FETCH_ERROR, e.error_name(code) if code else "no answer")
            break
        batches = decode_batches(p.records or b"")
        if not batches and p.records and scan.next_offset < p.high_watermark:
            raise e.ProtocolError(f"a fetch of {topic}[{partition}]@{scan.next_offset} returned "
                                  f"{len(p.records)} bytes and no whole batch")
        scan.feed(batches, p.log_start_offset, p.high_watermark)
    return scan.result()
