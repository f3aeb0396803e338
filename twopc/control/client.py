"""ControlClient: finish, inspect and fence Kafka transactions that other processes opened.

A synchronous facade over an asyncio loop on one background thread. Requests to the same broker are
pipelined over a small pool of reused connections; a batch of EndTxn goes out all at once.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from twopc.control import errors as e
from twopc.control import group_messages as gm
from twopc.control import groups as gr
from twopc.control import log_checks as lc
from twopc.control import partition_messages as pm
from twopc.control import partitions as pa
from twopc.control import transactions as tx
from twopc.control.cluster import Cluster
from twopc.control.config import settings_from_config
from twopc.control.logcheck import (
    FetchProbe,
    LogCheckRequest,
    LogCheckResult,
)
from twopc.control.messages import ApiKey, TopicInfo
from twopc.control.outcomes import (
    EndTxnOutcome,
    EndTxnRequest,
    FenceResult,
    OutcomeKind,
    ReleaseResult,
    TransactionDescription,
    TransactionListing,
    TxnState,
)
from twopc.control.readback import SpanRecords

T = TypeVar("T")


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

    async def _topics(self, topics: Sequence[str]) -> dict[str, TopicInfo]:
        """Each topic's Metadata entry, asked afresh; a topic the broker answers an error for
        (UNKNOWN_TOPIC_OR_PARTITION: it does not exist) is that error, naming the topic."""
        resp = await self._cluster.refresh_metadata(list(topics))
        out: dict[str, TopicInfo] = {}
        for t in resp.topics:
            if t.error_code != 0:
                raise e.api_error(t.error_code, f"metadata of topic {t.name!r}")
            if t.name is not None:
                out[t.name] = t
        return out

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        async def run() -> dict[str, str]:
            return {name: str(t.topic_id) for name, t in (await self._topics(topics)).items()}
        return self._call(run())

    def topic_partitions(self, topics: Sequence[str]) -> dict[str, list[int]]:
        """Each topic's partition numbers, from a fresh Metadata request."""
        async def run() -> dict[str, list[int]]:
            found = await self._topics(sorted(set(topics)))
            return {name: sorted(p.partition for p in t.partitions) for name, t in found.items()}
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
        return self._start(tx.describe_transactions(self._cluster, list(dict.fromkeys(ids))))

    def start_open_among(self, ids: Sequence[str]) -> Future[list[str]]:
        """The ids among `ids` whose transaction is open (Ongoing), asked now (DescribeTransactions,
        answered through the returned future): for a batch pool's hundreds of ids, cheaper than
        `describe_transactions` by the descriptions it does not build."""
        return self._start(tx.open_among(self._cluster, list(dict.fromkeys(ids))))

    def list_transactions(self, prefix: str | None = None, states: Sequence[TxnState] = (),
                          producer_ids: Sequence[int] = ()) -> list[TransactionListing]:
        """Transactions known to every coordinator, optionally those whose id starts with `prefix`,
        whose state is one of `states` and whose producer id is one of `producer_ids`."""
        return self.start_list_transactions(prefix, states, producer_ids).result()

    def start_list_transactions(self, prefix: str | None = None, states: Sequence[TxnState] = (),
                                producer_ids: Sequence[int] = ()
                                ) -> Future[list[TransactionListing]]:
        """`list_transactions`, sent now and answered through the returned future, so that a
        caller can have other requests of this client (EndTxn) in flight meanwhile."""
        return self._start(tx.list_transactions(self._cluster, prefix, [s.value for s in states],
                                                tuple(sorted(set(producer_ids)))))

    # --- ending and fencing --------------------------------------------------------------

    def end_txns(self, requests: Sequence[EndTxnRequest],
                 precheck: bool = True) -> dict[str, EndTxnOutcome]:
        """Commit or abort each transaction with its recorded producer id and epoch, all in
        parallel. With `precheck`, one DescribeTransactions per coordinator first tells a retry
        ("already committed") from a first commit; it never changes what is sent."""
        ids = [r.transactional_id for r in requests]
        if len(set(ids)) != len(ids):
            raise ValueError("end_txns: each transactional id may appear only once")
        return self._call(tx.end_all(self._cluster, list(requests), precheck))

    def fence(self, ids: Sequence[str], timeout_ms: int = 60000) -> dict[str, FenceResult]:
        """InitProducerId on each id: bumps its epoch, aborts its open transaction, and stops any
        producer still holding it from writing again. The coordinator forgets the fenced
        transaction's outcome; the log still holds it (see log_check)."""
        return self._call(tx.fence_all(self._cluster, list(dict.fromkeys(ids)), timeout_ms))

    def release_stranded(self, transactional_id: str, partitions: Sequence[tuple[str, int]],
                         producer_id: int | None = None,
                         timeout_ms: int | None = None) -> ReleaseResult:
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
        The release's own transaction timeout: `timeout_ms`, by default the client's
        `twopc.control.release.timeout.ms` (15 minutes; 1 minute where the broker allows less),
        the time a later check has to commit a release cut short before its EndTxn.
        """
        parts = tuple(sorted(dict.fromkeys((str(t), int(p)) for t, p in partitions)))
        if not parts:
            raise ValueError("release_stranded needs at least one partition")
        timeout = self._settings.release_timeout_ms if timeout_ms is None else timeout_ms
        return self._call(tx.release_stranded(self._cluster, transactional_id, parts, producer_id,
                                              timeout))

    # --- the log ---------------------------------------------------------------------------

    def fetch_at(self, topic: str, partition: int, offset: int,
                 topic_id: str | None = None) -> FetchProbe:
        return self._call(pa.fetch_at(self._cluster, topic, partition, offset,
                                         uuid.UUID(topic_id) if topic_id else None))

    def last_stable_offsets(self, partitions: Sequence[tuple[str, int]],
                            budget_s: float | None = None) -> dict[tuple[str, int], int]:
        """Each partition's last stable offset (ListOffsets LATEST at read_committed), one request
        per leader. A partition whose leader answers an error is left out. `budget_s`: retry a
        partition without a reachable leader for that long at most (else the retry settings)."""
        return self._call(pa.last_stable(self._cluster, sorted(set(partitions)), budget_s))

    def high_watermarks(self, partitions: Sequence[tuple[str, int]],
                        budget_s: float | None = None) -> dict[tuple[str, int], int]:
        """Each partition's high watermark (ListOffsets LATEST at read_uncommitted), one request
        per leader; as `last_stable_offsets`, a partition whose leader answers an error is left
        out. The difference of the two is what open transactions hold back from read_committed
        consumers."""
        return self._call(pa.high_watermarks(self._cluster, sorted(set(partitions)), budget_s))

    def wait_stable(self, past: Mapping[tuple[str, int], int], within_s: float
                    ) -> dict[tuple[str, int], int]:
        """Each partition's last stable offset, asked again (1 ms apart for the first 10 ms, then
        backing off to 8) until it is above the offset `past` gives, or `within_s` has gone by:
        what commit markers on their way take. Answers what it last saw; the caller judges (a
        partition whose leader answers an error is left out)."""
        return self._call(pa.wait_stable(self._cluster, dict(past), within_s))

    def log_check(self, topic: str, partition: int, offset: int, producer_id: int, epoch: int,
                  topic_id: str | None = None, budget_s: float | None = None) -> LogCheckResult:
        """What the log says of the transaction of (`producer_id`, `epoch`) whose first record in
        this partition is at `offset`. NOT_YET_STABLE means: ask again later. `budget_s`: retry
        a leader that cannot be reached for that long at most (else the retry settings)."""
        return self._call(pa.log_check(self._cluster, topic, partition, offset, producer_id, epoch,
                                       topic_id, budget_s))

    def log_checks(self, checks: Sequence[LogCheckRequest], budget_s: float | None = None
                   ) -> list[LogCheckResult]:
        """`log_check` of each of `checks`, all together: one read_committed fetch per partition
        from its lowest span answers every span its batches reach (the rest are fetched again
        from the first one not reached), and the partitions of one leader share each Fetch
        request; what the check of a batch's every span costs is a round trip or two, not one
        per span. Answers in the order asked; a partition whose fetch fails (no leader found, an
        error answer) answers UNKNOWN (FETCH_ERROR) for its own spans only, naming what
        failed."""
        return self._call(lc.log_checks(self._cluster, list(checks), budget_s)) if checks else []

    def read_transaction(self, topic: str, partition: int, first_offset: int, producer_id: int,
                         epoch: int, topic_id: str | None, expected: int,
                         max_bytes: int = pa.READ_MAX_BYTES) -> SpanRecords:
        """The records of (`producer_id`, `epoch`)'s ended transaction in one partition, read
        back at read_uncommitted from `first_offset` to its marker (at most `expected` records
        kept; a fetch returns at most `max_bytes` past its first batch), or why not
        (readback.py). For copy-forward: the records of an aborted transaction stay in the log
        until retention."""
        return self._call(pa.read_transaction(self._cluster, topic, partition, first_offset,
                                              producer_id, epoch, topic_id, expected, max_bytes))

    def describe_producers(self, partitions: Sequence[tuple[str, int]],
                           budget_s: float | None = None
                           ) -> dict[tuple[str, int], pm.ProducerState]:
        """The active producers of each partition, with the start offset of their open transaction
        (which names who holds the last stable offset back) and their last sequence number; one
        request per leader. A partition whose leader still answers an error once the retries are
        spent (or `budget_s`) is returned with that error."""
        return self._call(pa.describe_producers(self._cluster, sorted(set(partitions)), budget_s))

    # --- consumer group offsets (twopc.commitSourceOffsets; group_messages.py) -------------

    def add_offsets_to_txn(self, transactional_id: str, producer_id: int, epoch: int,
                           group_id: str) -> int:
        """AddOffsetsToTxn at the id's transaction coordinator: the group's offsets partition
        joins the open transaction of (`producer_id`, `epoch`). Returns the error code (0: added);
        retried while the coordinator moves or the transaction is busy."""
        tid = transactional_id
        code: int = self._call(tx.coordinator_call(self._cluster,
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
        return self._call(gr.group_call(self._cluster, group, lambda v: gm.encode_txn_offset_commit(
            v, tid, group, producer_id, epoch, offsets), gm.decode_txn_offset_commit,
            ApiKey.TXN_OFFSET_COMMIT))

    def commit_group_offsets(self, group_id: str,
                             offsets: Sequence[gm.TopicOffset]) -> dict[tuple[str, int], int]:
        """A plain OffsetCommit (no transaction) as a group without members; each partition's
        error code (0: committed)."""
        return self._call(gr.group_call(self._cluster,
            group_id, lambda v: gm.encode_offset_commit(v, group_id, offsets),
            gm.decode_offset_commit, ApiKey.OFFSET_COMMIT))

    def group_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]] | None = None,
                      require_stable: bool = True) -> gm.GroupOffsetsResponse:
        """The group's committed offsets (OffsetFetch v7); with `require_stable`, a partition whose
        offsets wait in an open transaction answers UNSTABLE_OFFSET_COMMIT."""
        parts = None if partitions is None else sorted(set(partitions))
        return self._call(gr.group_call(self._cluster,
            group_id, lambda v: gm.encode_offset_fetch(v, group_id, parts, require_stable),
            gm.decode_offset_fetch, ApiKey.OFFSET_FETCH))


__all__ = ["BrokerVersionHint", "ControlClient", "OutcomeKind"]
