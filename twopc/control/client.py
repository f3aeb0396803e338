"""ControlClient: finish, inspect and fence Kafka transactions that other processes opened.

A synchronous facade over an asyncio loop on one background thread. Requests to the same broker are
pipelined over a small pool of reused connections; a batch of EndTxn goes out all at once.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from twopc.control import errors as e
from twopc.control import group_messages as gm
from twopc.control import messages as m
from twopc.control.cluster import Backoff, Cluster, gather_dict
from twopc.control.config import settings_from_config
from twopc.control.errors import BrokerConnectionError, KafkaApiError, RetriesExhaustedError
from twopc.control.logcheck import FetchProbe, LogCheckResult, LogOutcome, UnknownReason, decide
from twopc.control.messages import ApiKey
from twopc.control.outcomes import (
    EndTxnOutcome,
    EndTxnRequest,
    FenceResult,
    OutcomeKind,
    ReleaseResult,
    TransactionDescription,
    TransactionListing,
    TxnState,
    classify_end_txn,
)
from twopc.control.records import batch_headers

T = TypeVar("T")
END_TXN_MAX_VERSION = 4
# Small on purpose: the broker still returns the whole first batch (KIP-74), and only its header
# is read.
_PROBE_MAX_BYTES = 1024


@dataclass(frozen=True)
class BrokerVersionHint:
    """What the offered API versions say about the broker release (there is no version API)."""

    at_least: str
    transaction_version: int
    two_phase_commit_offered: bool  # InitProducerId v6 (KIP-939) offered

    @property
    def supported(self) -> bool:
        return self.at_least != "<3.6"

    def __str__(self) -> str:
        return (f"Apache Kafka {self.at_least} (transaction.version={self.transaction_version}"
                f"{', KIP-939 offered' if self.two_phase_commit_offered else ''})")


def version_hint(versions: Mapping[int, tuple[int, int]],
                 features: Mapping[str, int]) -> BrokerVersionHint:
    def top(key: int) -> int:
        return versions.get(key, (0, -1))[1]

    if top(ApiKey.LIST_TRANSACTIONS) >= 2:
        at_least = ">=4.1"
    elif top(ApiKey.END_TXN) >= 5:
        at_least = ">=4.0"
    elif top(ApiKey.LIST_TRANSACTIONS) >= 1:
        at_least = ">=3.8"
    elif top(ApiKey.ADD_PARTITIONS_TO_TXN) >= 4:  # v4 (KIP-890 part 1) came with 3.6
        at_least = ">=3.6"
    else:
        at_least = "<3.6"
    return BrokerVersionHint(at_least, features.get("transaction.version", 0),
                             top(ApiKey.INIT_PRODUCER_ID) >= 6)


def _prefix_pattern(prefix: str) -> str:
    # Escape every non-alphanumeric ASCII character: valid in both Java regex and RE2.
    body = "".join(c if c.isalnum() or ord(c) > 127 else "\\" + c for c in prefix)
    return f"^{body}.*"


class ControlClient:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self._settings = settings_from_config(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="twopc-control",
                                        daemon=True)
        self._thread.start()
        self._cluster = self._call(self._make_cluster())
        self._closed = False

    async def _make_cluster(self) -> Cluster:
        return Cluster(self._settings)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._start(coro).result()

    def _start(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if getattr(self, "_closed", False):
            coro.close()
            raise e.ControlError("this ControlClient is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # --- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._call(self._cluster.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- broker facts --------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        async def run() -> dict[int, tuple[int, int]]:
            return dict((await self._cluster.any_connection()).api_versions)
        return self._call(run())

    def broker_version_hint(self) -> BrokerVersionHint:
        async def run() -> BrokerVersionHint:
            conn = await self._cluster.any_connection()
            return version_hint(conn.api_versions, conn.finalized_features)
        return self._call(run())

    def require_supported_broker(self) -> BrokerVersionHint:
        hint = self.broker_version_hint()
        if not hint.supported:
            raise e.UnsupportedBrokerError(
                f"the broker looks older than Apache Kafka 3.6 ({hint}); before 3.6 a late "
                "produce request can leave a transaction hanging (KIP-890): upgrade the brokers")
        return hint

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        async def run() -> dict[str, str]:
            resp = await self._cluster.refresh_metadata(list(topics))
            out: dict[str, str] = {}
            for t in resp.topics:
                if t.error_code != 0:
                    raise e.api_error(t.error_code, f"metadata of topic {t.name!r}")
                if t.name is not None:
                    out[t.name] = str(t.topic_id)
            return out
        return self._call(run())

    def coordinators(self, ids: Sequence[str]) -> dict[str, int]:
        """The node id of each transactional id's transaction coordinator, asked afresh
        (FindCoordinator, key type 1; retried while the coordinator is moving or loading)."""
        async def run() -> dict[str, int]:
            for tid in ids:
                self._cluster.forget_coordinator(tid)
            return await self._cluster.coordinators(list(dict.fromkeys(ids)))
        return self._call(run())

    def leaders(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Each partition's leader from a fresh Metadata request (-1: none right now)."""
        async def run() -> dict[tuple[str, int], int]:
            wanted = set(partitions)
            resp = await self._cluster.refresh_metadata(sorted({t for t, _ in wanted}))
            found = {(t.name, p.partition): p.leader for t in resp.topics if t.name
                     for p in t.partitions if (t.name, p.partition) in wanted}
            missing = sorted(wanted - set(found))
            if missing:
                raise e.api_error(3, f"partitions {missing[:5]}")  # UNKNOWN_TOPIC_OR_PARTITION
            return found
        return self._call(run())

    # --- describe and list ---------------------------------------------------------------

    def describe_transactions(self, ids: Sequence[str]) -> dict[str, TransactionDescription]:
        return self.start_describe_transactions(ids).result()

    def start_describe_transactions(self, ids: Sequence[str]
                                    ) -> Future[dict[str, TransactionDescription]]:
        """`describe_transactions`, sent now and answered through the returned future (a read:
        a caller may start it before it knows it needs the answer)."""
        return self._start(self._describe(list(dict.fromkeys(ids))))

    async def _describe(self, ids: list[str]) -> dict[str, TransactionDescription]:
        out: dict[str, TransactionDescription] = {}
        todo = ids
        backoff = Backoff(self._settings)
        last = 0
        while todo:
            by_node: dict[int, list[str]] = {}
            for tid, node in (await self._cluster.coordinators(todo)).items():
                by_node.setdefault(node, []).append(tid)
            replies = await asyncio.gather(
                *(self._describe_at(node, batch) for node, batch in by_node.items()),
                return_exceptions=True)
            retry: list[str] = []
            for (node, batch), reply in zip(by_node.items(), replies, strict=True):
                if isinstance(reply, BrokerConnectionError):
                    self._cluster.drop_node(node)
                    retry += batch
                    last = 13
                    continue
                if isinstance(reply, BaseException):
                    raise reply
                for entry in reply:
                    if entry.error_code in e.COORDINATOR_RETRIABLE:
                        self._cluster.forget_coordinator(entry.transactional_id)
                        retry.append(entry.transactional_id)
                        last = entry.error_code
                    elif entry.error_code == e.ERROR_CODES["TRANSACTIONAL_ID_NOT_FOUND"]:
                        out[entry.transactional_id] = TransactionDescription(
                            entry.transactional_id, TxnState.UNKNOWN_ID, -1, -1, -1, -1, (),
                            entry.error_code, node)
                    elif entry.error_code != 0:
                        raise e.api_error(entry.error_code,
                                          f"DescribeTransactions of {entry.transactional_id!r}")
                    else:
                        out[entry.transactional_id] = TransactionDescription(
                            entry.transactional_id, TxnState.parse(entry.state),
                            entry.producer_id, entry.producer_epoch, entry.timeout_ms,
                            entry.start_ms, entry.partitions, 0, node)
            todo = retry
            if todo and not await backoff.wait():
                raise RetriesExhaustedError(last, f"DescribeTransactions of {todo[:3]}")
        return {tid: out[tid] for tid in ids}

    async def _describe_at(self, node: int, ids: list[str]) -> list[m.TxnStateEntry]:
        conn = await self._cluster.connection(node)
        version = conn.version(ApiKey.DESCRIBE_TRANSACTIONS)
        reader = await conn.request(ApiKey.DESCRIBE_TRANSACTIONS, version,
                                    m.encode_describe_transactions(version, ids))
        return m.decode_describe_transactions(version, reader)

    def list_transactions(self, prefix: str | None = None,
                          states: Sequence[TxnState] = ()) -> list[TransactionListing]:
        """Transactions known to every coordinator, optionally those whose id starts with `prefix`
        and whose state is one of `states`."""
        return self.start_list_transactions(prefix, states).result()

    def start_list_transactions(self, prefix: str | None = None, states: Sequence[TxnState] = ()
                                ) -> Future[list[TransactionListing]]:
        """`list_transactions`, sent now and answered through the returned future, so that a
        caller can have other requests of this client (EndTxn) in flight meanwhile."""
        return self._start(self._list(prefix, [s.value for s in states]))

    async def _list(self, prefix: str | None, states: list[str]) -> list[TransactionListing]:
        await self._cluster.refresh_metadata()
        nodes = sorted(self._cluster.brokers)
        replies = await asyncio.gather(*(self._list_at(n, prefix, states) for n in nodes))
        seen: dict[str, TransactionListing] = {}
        for node, resp in zip(nodes, replies, strict=True):
            for tid, pid, state in resp.transactions:
                if prefix is not None and not tid.startswith(prefix):
                    continue  # old brokers cannot filter by id: filter here
                seen[tid] = TransactionListing(tid, pid, TxnState.parse(state), node)
        return sorted(seen.values(), key=lambda t: t.transactional_id)

    async def _list_at(self, node: int, prefix: str | None,
                       states: list[str]) -> m.ListTransactionsResponse:
        backoff = Backoff(self._settings)
        while True:
            conn = await self._cluster.connection(node)
            version = conn.version(ApiKey.LIST_TRANSACTIONS)
            pattern = _prefix_pattern(prefix) if prefix and version >= 2 else None
            resp = m.decode_list_transactions(version, await conn.request(
                ApiKey.LIST_TRANSACTIONS, version,
                m.encode_list_transactions(version, states, pattern)))
            if resp.error_code == 0:
                return resp
            if resp.error_code not in e.COORDINATOR_RETRIABLE or not await backoff.wait():
                raise e.api_error(resp.error_code, f"ListTransactions at broker {node}")

    # --- ending and fencing --------------------------------------------------------------

    def end_txns(self, requests: Sequence[EndTxnRequest],
                 precheck: bool = True) -> dict[str, EndTxnOutcome]:
        """Commit or abort each transaction with its recorded producer id and epoch, all in
        parallel. With `precheck`, one DescribeTransactions per coordinator first tells a retry
        ("already committed") from a first commit; it never changes what is sent."""
        ids = [r.transactional_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("end_txns: each transactional id may appear only once")
        return self._call(self._end_all(list(requests), precheck))

    async def _end_all(self, requests: list[EndTxnRequest],
                       precheck: bool) -> dict[str, EndTxnOutcome]:
        prior: dict[str, TransactionDescription] = {}
        if precheck and requests:
            try:
                prior = await self._describe([r.transactional_id for r in requests])
            except e.ControlError:
                prior = {}  # only labels depend on it; EndTxn itself decides
        else:
            await self._cluster.coordinators([r.transactional_id for r in requests])
        return await gather_dict({
            r.transactional_id: self._end_one(r, prior.get(r.transactional_id))
            for r in requests})

    async def _end_one(self, req: EndTxnRequest,
                       prior: TransactionDescription | None) -> EndTxnOutcome:
        tid = req.transactional_id
        code = await self._coordinator_call(tid, lambda v: m.encode_end_txn(
            v, tid, req.producer_id, req.epoch, req.commit), m.decode_end_txn,
            ApiKey.END_TXN, END_TXN_MAX_VERSION)
        return classify_end_txn(req, code, prior)

    async def _coordinator_call(self, tid: str, encode: Any, decode: Any, api: ApiKey,
                                ceiling: int | None = None) -> Any:
        """One request to `tid`'s coordinator, retried while the coordinator moves or loads, or
        answers CONCURRENT_TRANSACTIONS. Returns the error code (or decoded response) of the
        last answer; an exhausted budget returns that retriable code for the caller to classify."""
        backoff = Backoff(self._settings)
        while True:
            node: int | None = None
            try:
                node = (await self._cluster.coordinators([tid]))[tid]
                conn = await self._cluster.connection(node)
                version = conn.version(api, ceiling)
                result = decode(version, await conn.request(api, version, encode(version)))
            except BrokerConnectionError:
                # The coordinator may be down: look it up again. Ending a transaction twice is
                # safe (a retry of the same ending answers NONE).
                self._cluster.forget_coordinator(tid)
                if node is not None:
                    self._cluster.drop_node(node)
                result = None
                code = e.ERROR_CODES["NETWORK_EXCEPTION"]
            except RetriesExhaustedError as exc:
                return exc.code if api == ApiKey.END_TXN else _raise(exc)
            else:
                code = result if isinstance(result, int) else result.error_code
            if code in e.COORDINATOR_RETRIABLE:
                self._cluster.forget_coordinator(tid)
            if code not in e.COORDINATOR_RETRIABLE and code not in e.RETRY_SAME:
                return result
            if not await backoff.wait():
                return code if result is None or isinstance(result, int) else result

    def fence(self, ids: Sequence[str], timeout_ms: int = 60000) -> dict[str, FenceResult]:
        """InitProducerId on each id: bumps its epoch, aborts its open transaction, and stops any
        producer still holding it from writing again. The coordinator forgets the fenced
        transaction's outcome; the log still holds it (see log_check)."""
        return self._call(self._fence_all(list(dict.fromkeys(ids)), timeout_ms))

    async def _fence_all(self, ids: list[str], timeout_ms: int) -> dict[str, FenceResult]:
        await self._cluster.coordinators(ids)
        return await gather_dict({tid: self._fence_one(tid, timeout_ms) for tid in ids})

    async def _fence_one(self, tid: str, timeout_ms: int) -> FenceResult:
        resp = await self._coordinator_call(
            tid, lambda v: m.encode_init_producer_id(v, tid, timeout_ms),
            m.decode_init_producer_id, ApiKey.INIT_PRODUCER_ID)
        if isinstance(resp, int):
            return FenceResult(tid, -1, -1, e.error_name(resp))
        if resp.error_code != 0:
            return FenceResult(tid, -1, -1, e.error_name(resp.error_code))
        return FenceResult(tid, resp.producer_id, resp.producer_epoch)

    def release_stranded(self, transactional_id: str, partitions: Sequence[tuple[str, int]],
                         producer_id: int | None = None,
                         timeout_ms: int = 60000) -> ReleaseResult:
        """End a committed transaction whose commit markers never reached `partitions`.

        A broker killed mid-commit can record CompleteCommit without writing the markers (see
        tests/broker/test_restart_mid_commit.py): those partitions keep the transaction open
        forever, and a retried EndTxn or a fence sends nothing. A new transaction on the same
        id (InitProducerId: same producer id, next epoch) that adds exactly those partitions and
        commits writes COMMIT markers of that producer id there, which end the stranded
        transaction as committed. No data record is written.

        InitProducerId aborts whatever transaction the id holds open: call it only for an id no
        live writer uses. With `producer_id`, stop (error PRODUCER_ID_CHANGED) if the id now has
        another producer id: that producer's markers cannot end the stranded transaction.
        """
        parts = tuple(sorted(dict.fromkeys((str(t), int(p)) for t, p in partitions)))
        if not parts:
            raise ValueError("release_stranded needs at least one partition")
        return self._call(self._release(transactional_id, parts, producer_id, timeout_ms))

    async def _release(self, tid: str, parts: tuple[tuple[str, int], ...],
                       expected_pid: int | None, timeout_ms: int) -> ReleaseResult:
        init = await self._fence_one(tid, timeout_ms)
        if init.error is not None:
            return ReleaseResult(tid, -1, -1, parts, init.error, "init_producer_id")
        pid, epoch = init.producer_id, init.epoch
        if expected_pid is not None and pid != expected_pid:
            return ReleaseResult(tid, pid, epoch, parts, "PRODUCER_ID_CHANGED",
                                 "init_producer_id")
        added = await self._coordinator_call(
            tid, lambda v: m.encode_add_partitions_to_txn(v, tid, pid, epoch, parts),
            m.decode_add_partitions_to_txn, ApiKey.ADD_PARTITIONS_TO_TXN,
            m.ADD_PARTITIONS_MAX_VERSION)
        code = added if isinstance(added, int) else added.error_code
        if code != 0:
            return ReleaseResult(tid, pid, epoch, parts, e.error_name(code), "add_partitions")
        ended = await self._end_one(EndTxnRequest(tid, pid, epoch, True), None)
        if not ended.committed:
            return ReleaseResult(tid, pid, epoch, parts,
                                 ended.error or ended.kind.value, "end_txn")
        return ReleaseResult(tid, pid, epoch, parts)

    # --- the log ---------------------------------------------------------------------------

    def fetch_at(self, topic: str, partition: int, offset: int,
                 topic_id: str | None = None) -> FetchProbe:
        return self._call(self._fetch_at(topic, partition, offset,
                                         uuid.UUID(topic_id) if topic_id else None))

    async def _fetch_at(self, topic: str, partition: int, offset: int,
                        topic_id: uuid.UUID | None) -> FetchProbe:
        backoff = Backoff(self._settings)
        while True:
            node: int | None = None
            try:
                node = await self._cluster.leader(topic, partition)
                conn = await self._cluster.connection(node)
                version = conn.version(ApiKey.FETCH, None if topic_id else 12)
                target: str | uuid.UUID = topic_id if version >= 13 and topic_id else topic
                body = m.encode_fetch(version, target, partition, offset, _PROBE_MAX_BYTES)
                top, parts = m.decode_fetch(version, await conn.request(ApiKey.FETCH, version,
                                                                         body))
                code = top if top != 0 else (parts[0].error_code if parts else 0)
            except BrokerConnectionError:
                self._cluster.forget_leader(topic, partition)
                if node is not None:
                    self._cluster.drop_node(node)
                code, parts = e.ERROR_CODES["NETWORK_EXCEPTION"], []
            if code in e.LEADER_RETRIABLE or code == e.ERROR_CODES["NETWORK_EXCEPTION"]:
                self._cluster.forget_leader(topic, partition)
                if await backoff.wait():
                    continue
            break
        p = parts[0] if parts else None
        headers = batch_headers(p.records) if p is not None and p.records else []
        lso = p.last_stable_offset if p else -1
        hw = p.high_watermark if p else -1
        log_start = p.log_start_offset if p else -1
        if code == e.ERROR_CODES["OFFSET_OUT_OF_RANGE"]:
            # An out-of-range answer carries no offsets: ask where the log starts and ends.
            log_start = await self._list_offset(topic, partition, m.EARLIEST)
            hw = await self._list_offset(topic, partition, m.LATEST)
        return FetchProbe(
            topic, partition, offset, None if code == 0 else e.error_name(code), lso, hw,
            log_start, tuple(p.aborted_transactions or ()) if p else (),
            headers[0] if headers else None)

    async def _list_offset(self, topic: str, partition: int, timestamp: int) -> int:
        conn = await self._cluster.connection(await self._cluster.leader(topic, partition))
        version = conn.version(ApiKey.LIST_OFFSETS)
        code, offset = m.decode_list_offsets(version, await conn.request(
            ApiKey.LIST_OFFSETS, version,
            m.encode_list_offsets(version, topic, partition, timestamp)))
        return offset if code == 0 else -1

    def last_stable_offsets(self, partitions: Sequence[tuple[str, int]]
                            ) -> dict[tuple[str, int], int]:
        """Each partition's last stable offset (ListOffsets LATEST at read_committed), one request
        per leader. A partition whose leader answers an error is left out."""
        return self._call(self._last_stable(sorted(set(partitions))))

    def wait_stable(self, past: Mapping[tuple[str, int], int], within_s: float
                    ) -> dict[tuple[str, int], int]:
        """Each partition's last stable offset, asked again (1 ms apart for the first 10 ms, then
        backing off to 8) until it is above the offset `past` gives, or `within_s` has gone by:
        what commit markers on their way take. Answers what it last saw; the caller judges (a
        partition whose leader answers an error is left out)."""
        return self._call(self._wait_stable(dict(past), within_s))

    async def _wait_stable(self, past: dict[tuple[str, int], int], within_s: float
                           ) -> dict[tuple[str, int], int]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        lso = await self._last_stable(sorted(past))
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
            lso.update(await self._last_stable(waiting))

    async def _last_stable(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        answers = await self._by_leader(partitions, ApiKey.LIST_OFFSETS,
                                        m.encode_list_offsets_latest, m.decode_list_offsets_all)
        return {tp: offset for tp, (code, offset) in answers.items()
                if code == 0 and offset is not None}

    async def _by_leader(self, partitions: list[tuple[str, int]], api: ApiKey,
                         encode: Callable[[int, list[tuple[str, int]]], bytes],
                         decode: Callable[[int, Any], Mapping[tuple[str, int], tuple[int, T]]],
                         ) -> dict[tuple[str, int], tuple[int, T | None]]:
        """Ask each partition's leader, one request per leader. A partition whose leader moved or
        could not be reached is asked again (within the retry settings); each partition gets its
        last (error code, answer), the answer None when no leader answered for it."""
        out: dict[tuple[str, int], tuple[int, T | None]] = {}
        todo = partitions
        backoff = Backoff(self._settings)
        network = e.ERROR_CODES["NETWORK_EXCEPTION"]
        while todo:
            by_node: dict[int, list[tuple[str, int]]] = {}
            for tp in todo:
                by_node.setdefault(await self._cluster.leader(*tp), []).append(tp)
            retry: list[tuple[str, int]] = []
            for node, tps in by_node.items():
                answers: Mapping[tuple[str, int], tuple[int, T]]
                try:
                    conn = await self._cluster.connection(node)
                    version = conn.version(api)
                    answers = decode(version, await conn.request(api, version, encode(version, tps)))
                except BrokerConnectionError:
                    self._cluster.drop_node(node)
                    answers = {}
                for tp in tps:
                    code, answer = answers.get(tp, (network, None))
                    out[tp] = (code, answer)
                    if code in e.LEADER_RETRIABLE or code == network:
                        self._cluster.forget_leader(*tp)
                        retry.append(tp)
            todo = retry
            if todo and not await backoff.wait():
                break
        return out

    def log_check(self, topic: str, partition: int, offset: int, producer_id: int, epoch: int,
                  topic_id: str | None = None) -> LogCheckResult:
        """What the log says of the transaction of (`producer_id`, `epoch`) whose first record in
        this partition is at `offset`. NOT_YET_STABLE means: ask again later."""
        return self._call(self._log_check(topic, partition, offset, producer_id, epoch,
                                          topic_id))

    async def _log_check(self, topic: str, partition: int, offset: int, producer_id: int,
                         epoch: int, topic_id: str | None) -> LogCheckResult:
        if topic_id is not None:
            resp = await self._cluster.refresh_metadata([topic])
            now = next((t for t in resp.topics if t.name == topic), None)
            if now is None or now.error_code != 0 or str(now.topic_id) != topic_id:
                seen = "gone" if now is None or now.error_code != 0 else str(now.topic_id)
                return LogCheckResult(LogOutcome.UNKNOWN, UnknownReason.TOPIC_CHANGED,
                                      f"recorded topic id {topic_id}, now {seen}")
        probe = await self._fetch_at(topic, partition, offset,
                                     uuid.UUID(topic_id) if topic_id else None)
        return decide(probe, producer_id, epoch)

    def describe_producers(self, partitions: Sequence[tuple[str, int]]
                           ) -> dict[tuple[str, int], m.ProducerState]:
        """The active producers of each partition, with the start offset of their open transaction
        (which names who holds the last stable offset back) and their last sequence number; one
        request per leader. A partition whose leader still answers an error once the retries are
        spent is returned with that error."""
        return self._call(self._describe_producers(sorted(set(partitions))))

    async def _describe_producers(self, partitions: list[tuple[str, int]]
                                  ) -> dict[tuple[str, int], m.ProducerState]:
        def decode(version: int, r: Any) -> dict[tuple[str, int], tuple[int, m.ProducerState]]:
            return {(s.topic, s.partition): (s.error_code, s)
                    for s in m.decode_describe_producers(version, r)}

        answers = await self._by_leader(partitions, ApiKey.DESCRIBE_PRODUCERS,
                                        m.encode_describe_producers, decode)
        return {tp: state if state is not None else m.ProducerState(*tp, code, None, ())
                for tp, (code, state) in answers.items()}

    # --- consumer group offsets (twopc.commitSourceOffsets; group_messages.py) -------------

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, epoch: int,
                           group_id: str) -> int:
        """AddOffsetsToTxn at the id's transaction coordinator: the group's offsets partition
        joins the open transaction of (`producer_id`, `epoch`). Returns the error code (0: added);
        retried while the coordinator moves or the transaction is busy."""
        tid = transactional_id
        code: int = self._call(self._coordinator_call(
            tid, lambda v: gm.encode_add_offsets_to_txn(v, tid, producer_id, epoch, group_id),
            gm.decode_add_offsets_to_txn, ApiKey.ADD_OFFSETS_TO_TXN))
        return code

    def txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int,
                          group_id: str, offsets: Sequence[gm.TopicOffset]
                          ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit at the group's coordinator: `offsets` written into the transaction
        (visible to the group when it commits, gone when it aborts), as a group without members
        (generation -1). Returns each partition's error code (0: written)."""
        tid, group = transactional_id, group_id
        return self._call(self._group_call(group, lambda v: gm.encode_txn_offset_commit(
            v, tid, group, producer_id, epoch, offsets), gm.decode_txn_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT))

    def commit_group_offsets(self, group_id: str,
                             offsets: Sequence[gm.TopicOffset]) -> dict[tuple[str, int], int]:
        """A plain OffsetCommit (no transaction) as a group without members; each partition's
        error code (0: committed)."""
        return self._call(self._group_call(
            group_id, lambda v: gm.encode_offset_commit(v, group_id, offsets),
            gm.decode_offset_commit, ApiKey.OFFSET_COMMIT))

    def group_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]] | None = None,
                      require_stable: bool = True) -> gm.GroupOffsetsResponse:
        """The group's committed offsets (OffsetFetch v7); with `require_stable`, a partition whose
        offsets wait in an open transaction answers UNSTABLE_OFFSET_COMMIT."""
        parts = None if partitions is None else sorted(set(partitions))
        return self._call(self._group_call(
            group_id, lambda v: gm.encode_offset_fetch(v, group_id, parts, require_stable),
            gm.decode_offset_fetch, ApiKey.OFFSET_FETCH))

    async def _group_call(self, group_id: str, encode: Callable[[int], bytes],
                          decode: Callable[[int, Any], T], api: ApiKey) -> T:
        """One request to the group's coordinator, retried (within the retry settings) while the
        coordinator moves, loads or is unreachable, or a partition answers a retriable error."""
        backoff = Backoff(self._settings)
        last = e.ERROR_CODES["NETWORK_EXCEPTION"]
        while True:
            node: int | None = None
            try:
                node = await self._cluster.group_coordinator(group_id)
                conn = await self._cluster.connection(node)
                version = conn.version(api)
                result = decode(version, await conn.request(api, version, encode(version)))
            except BrokerConnectionError:
                self._cluster.forget_group_coordinator(group_id)
                if node is not None:
                    self._cluster.drop_node(node)
            else:
                retriable = [c for c in _codes_of(result)
                             if c in e.COORDINATOR_RETRIABLE or c in e.RETRY_SAME]
                if not retriable:
                    return result
                last = retriable[0]
                if last in e.COORDINATOR_RETRIABLE:
                    self._cluster.forget_group_coordinator(group_id)
            if not await backoff.wait():
                raise RetriesExhaustedError(last, f"{api.name} of group {group_id!r}")


def _codes_of(result: object) -> list[int]:
    if isinstance(result, gm.GroupOffsetsResponse):
        return [result.error_code, *(p.error_code for p in result.partitions.values())]
    if isinstance(result, dict):
        return list(result.values())
    return [int(result)]  # type: ignore[call-overload]


def _raise(exc: KafkaApiError) -> Any:
    raise exc


__all__ = ["BrokerVersionHint", "ControlClient", "OutcomeKind"]
