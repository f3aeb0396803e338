"""Fetches of many partitions shared per leader: the log check's requests (log_checks.py).

Design: docs/design.md section 8 (the proof's cost: one Fetch request per leader).
"""

from __future__ import annotations

import asyncio
import uuid

from twopc.control import errors as e
from twopc.control import partition_messages as pm
from twopc.control.cluster import Cluster
from twopc.control.messages import ISOLATION_READ_COMMITTED, ApiKey

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
