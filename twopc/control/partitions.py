"""Requests to partition leaders: Fetch at one offset, last stable offsets, producer states, and the
log check built on them (docs/design.md section 4, pass 2; section 8).

Functions over one `Cluster`, run on the control client's event loop; `ControlClient` is their
synchronous face. A partition whose leader moved or cannot be reached is asked again within the
retry settings.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from twopc.control import errors as e
from twopc.control import partition_messages as pm
from twopc.control.cluster import Backoff, Cluster
from twopc.control.errors import BrokerConnectionError, KafkaApiError
from twopc.control.logcheck import (
    FetchProbe,
    LogCheckResult,
    LogOutcome,
    UnknownReason,
    decide,
)
from twopc.control.messages import ISOLATION_READ_COMMITTED, ISOLATION_READ_UNCOMMITTED, ApiKey
from twopc.control.readback import ReadProblem, Scan, SpanRecords
from twopc.control.record_batches import batch_headers
from twopc.control.record_decode import decode_batches

if TYPE_CHECKING:
    from twopc.control.fetch_batcher import FetchBatcher

T = TypeVar("T")
# Small on purpose: the broker still returns the whole first batch (KIP-74), and only its header
# is read.
PROBE_MAX_BYTES = 1024


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
