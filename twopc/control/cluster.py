"""The client's view of the cluster, on its event loop: brokers, connection pools, coordinators and
partition leaders, each looked up once and refreshed when a broker says it moved.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from twopc.control import messages as m
from twopc.control.config import ClientSettings
from twopc.control.connection import BrokerConnection
from twopc.control.errors import (
    COORDINATOR_RETRIABLE,
    ERROR_CODES,
    BrokerConnectionError,
    RetriesExhaustedError,
    api_error,
)
from twopc.control.messages import ApiKey, BrokerInfo, MetadataResponse

T = TypeVar("T")


class Backoff:
    """Exponential backoff with jitter inside a deadline: bounded retries, never a busy loop."""

    def __init__(self, settings: ClientSettings, budget_s: float | None = None) -> None:
        loop = asyncio.get_running_loop()
        budget = settings.retry_timeout_s if budget_s is None else min(budget_s,
                                                                         settings.retry_timeout_s)
        self._deadline = loop.time() + budget
        self._delay = settings.retry_backoff_s
        self._max = settings.retry_backoff_max_s
        self.attempts = 0

    @property
    def expired(self) -> bool:
        return asyncio.get_running_loop().time() >= self._deadline

    async def wait(self) -> bool:
        """Sleep before the next attempt; False when the deadline has passed."""
        self.attempts += 1
        left = self._deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return False
        await asyncio.sleep(min(left, self._delay * (0.5 + random.random())))
        self._delay = min(self._delay * 2, self._max)
        return True


class Cluster:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self.brokers: dict[int, BrokerInfo] = {}
        self._pools: dict[int, list[BrokerConnection]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._bootstrap: BrokerConnection | None = None
        self._down_until: dict[int, float] = {}
        self._coordinators: dict[str, int] = {}
        self._group_coordinators: dict[str, int] = {}  # group ids are another key space
        self._leaders: dict[tuple[str, int], int] = {}
        self._leaderless: set[tuple[str, int]] = set()  # in the metadata, without a leader now
        self.topic_ids: dict[str, uuid.UUID] = {}

    # --- connections ---------------------------------------------------------------------

    async def any_connection(self) -> BrokerConnection:
        """A connection to some live broker: known brokers first (recently failed ones last),
        then the bootstrap list."""
        now = asyncio.get_running_loop().time()
        nodes = random.sample(list(self.brokers), len(self.brokers))
        nodes.sort(key=lambda n: self._down_until.get(n, 0.0) > now)
        for node_id in nodes:
            try:
                return await self.connection(node_id)
            except BrokerConnectionError:
                continue
        if self._bootstrap is not None and self._bootstrap.alive:
            return self._bootstrap
        errors: list[str] = []
        for host, port in random.sample(self.settings.bootstrap, len(self.settings.bootstrap)):
            conn = BrokerConnection(host, port, self.settings)
            try:
                await conn.connect()
            except BrokerConnectionError as exc:
                errors.append(str(exc))
                continue
            if self._bootstrap is not None and self._bootstrap.alive:
                # Another request of this client connected meanwhile (both started with no
                # broker known): keep one, so that close() closes every connection it opened.
                await conn.close()
                return self._bootstrap
            if self._bootstrap is not None:
                await self._bootstrap.close()
            self._bootstrap = conn
            return conn
        raise BrokerConnectionError("no bootstrap broker reachable: " + "; ".join(errors))

    async def connection(self, node_id: int) -> BrokerConnection:
        info = self.brokers.get(node_id)
        if info is None:
            await self.refresh_metadata()
            info = self.brokers.get(node_id)
            if info is None:
                raise BrokerConnectionError(f"broker {node_id} is not in the cluster metadata")
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            pool = [c for c in self._pools.get(node_id, []) if c.alive]
            self._pools[node_id] = pool
            # Kafka serves one request per connection at a time: open another connection only
            # while every one we have is busy, up to the configured pool size.
            idle = min(pool, key=lambda c: c.in_flight, default=None)
            if idle is not None and (idle.in_flight == 0
                                     or len(pool) >= self.settings.connections_per_broker):
                return idle
            conn = BrokerConnection(info.host, info.port, self.settings, node_id)
            try:
                await conn.connect()
            except BrokerConnectionError:
                self._down_until[node_id] = asyncio.get_running_loop().time() + 5.0
                raise
            self._down_until.pop(node_id, None)
            pool.append(conn)
            return conn

    async def close(self) -> None:
        conns = [c for pool in self._pools.values() for c in pool]
        if self._bootstrap is not None:
            conns.append(self._bootstrap)
        self._pools.clear()
        self._bootstrap = None
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    def drop_node(self, node_id: int) -> None:
        """Forget what we believed about a broker that failed us (it may be down or moved)."""
        for cache in (self._coordinators, self._group_coordinators):
            for key in [k for k, v in cache.items() if v == node_id]:
                del cache[key]
        for tp in [k for k, v in self._leaders.items() if v == node_id]:
            del self._leaders[tp]

    # --- metadata ------------------------------------------------------------------------

    async def refresh_metadata(self, topics: Sequence[str] | None = ()) -> MetadataResponse:
        """Metadata for `topics` (empty: brokers only; None: every topic)."""
        backoff = Backoff(self.settings)
        while True:
            conn = await self._metadata_connection()
            try:
                version = conn.version(ApiKey.METADATA)
                resp = m.decode_metadata(version, await conn.request(
                    ApiKey.METADATA, version,
                    m.encode_metadata(version, None if topics is None else list(topics))))
                break
            except BrokerConnectionError:
                if conn.node_id is not None:
                    self.drop_node(conn.node_id)
                if not await backoff.wait():
                    raise
        if resp.brokers:
            self.brokers = {b.node_id: b for b in resp.brokers}
        for topic in resp.topics:
            if topic.error_code == 0 and topic.name:
                self.topic_ids[topic.name] = topic.topic_id
                for p in topic.partitions:
                    if p.leader >= 0:
                        self._leaders[(topic.name, p.partition)] = p.leader
                        self._leaderless.discard((topic.name, p.partition))
                    else:
                        self._leaderless.add((topic.name, p.partition))
        return resp

    async def _metadata_connection(self) -> BrokerConnection:
        return await self.any_connection()

    async def leader(self, topic: str, partition: int) -> int:
        if (topic, partition) not in self._leaders:
            await self.refresh_metadata([topic])
        if (topic, partition) in self._leaderless:  # it exists, its leader is down
            raise api_error(ERROR_CODES["LEADER_NOT_AVAILABLE"], f"partition {topic}-{partition}")
        if (topic, partition) not in self._leaders:
            raise api_error(3, f"partition {topic}-{partition}")  # UNKNOWN_TOPIC_OR_PARTITION
        return self._leaders[(topic, partition)]

    def forget_leader(self, topic: str, partition: int) -> None:
        self._leaders.pop((topic, partition), None)

    # --- transaction coordinators ----------------------------------------------------------

    def forget_coordinator(self, transactional_id: str) -> None:
        self._coordinators.pop(transactional_id, None)

    def forget_group_coordinator(self, group_id: str) -> None:
        self._group_coordinators.pop(group_id, None)

    async def group_coordinator(self, group_id: str) -> int:
        """The coordinator of a consumer group (FindCoordinator key type 0)."""
        found = await self.coordinators([group_id], key_type=m.COORDINATOR_KEY_GROUP)
        return found[group_id]

    async def coordinators(self, ids: Sequence[str],
                           key_type: int = m.COORDINATOR_KEY_TRANSACTION) -> dict[str, int]:
        """The coordinator of each transactional id (or group id, with `key_type` 0);
        FindCoordinator v4 asks for many at once."""
        cache = (self._group_coordinators if key_type == m.COORDINATOR_KEY_GROUP
                 else self._coordinators)
        missing = [i for i in dict.fromkeys(ids) if i not in cache]
        backoff = Backoff(self.settings)
        while missing:
            conn = await self.any_connection()
            version = conn.version(ApiKey.FIND_COORDINATOR)
            batches = [missing] if version >= 4 else [[i] for i in missing]
            retry: list[str] = []
            last_error = 0
            try:
                replies = await asyncio.gather(*(self._find(conn, version, b, key_type)
                                                 for b in batches))
            except BrokerConnectionError:
                if conn.node_id is not None:
                    self.drop_node(conn.node_id)
                retry, last_error = missing, 13
                replies = []
            for reply in replies:
                for c in reply:
                    if c.error_code == 0:
                        self.brokers.setdefault(c.node_id, BrokerInfo(c.node_id, c.host, c.port))
                        cache[c.key] = c.node_id
                    elif c.error_code in COORDINATOR_RETRIABLE:
                        retry.append(c.key)
                        last_error = c.error_code
                    else:
                        raise api_error(c.error_code, f"FindCoordinator for {c.key!r}",
                                        c.error_message)
            missing = retry
            if missing and not await backoff.wait():
                raise RetriesExhaustedError(last_error, f"FindCoordinator for {missing[:3]}")
        return {i: cache[i] for i in ids}

    async def _find(self, conn: BrokerConnection, version: int, keys: list[str],
                    key_type: int) -> list[m.CoordinatorAddress]:
        reader = await conn.request(ApiKey.FIND_COORDINATOR, version,
                                    m.encode_find_coordinator(version, keys, key_type))
        return m.decode_find_coordinator(version, reader, keys)


async def gather_dict(items: dict[str, Awaitable[T]]) -> dict[str, T]:
    keys = list(items)
    values = await asyncio.gather(*(items[k] for k in keys))
    return dict(zip(keys, values, strict=True))

