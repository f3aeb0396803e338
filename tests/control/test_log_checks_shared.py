"""`log_checks` sharing one Fetch request among a leader's partitions (partitions.py), against a
fake leader: an error of one partition in the shared answer is retried or reported for that
partition alone, and a partition the shared answer left empty (its first batch did not fit in what
the others left) is asked alone before any verdict."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from twopc.control import errors as e
from twopc.control import log_checks as lc
from twopc.control.config import settings_from_config
from twopc.control.logcheck import LogCheckRequest, LogOutcome, UnknownReason
from twopc.control.protocol import Reader, Writer
from twopc.control.record_batches import HEADER_SIZE, BatchHeader

PID, EPOCH = 5, 1
TOPIC = "t"


def batch(base: int, control: bool = False) -> bytes:
    # batch_length counts the bytes after base offset and length: here the header alone.
    return BatchHeader(base, HEADER_SIZE - 12, 0, 2, 0, 0x30 if control else 0x10, 0, 0, 0,
                       PID, EPOCH, 0, 1).encode()


Part = tuple[int, int, bytes]  # (partition, error code, records)


def answer(parts: list[Part]) -> Reader:
    def part(w: Writer, p: Part) -> None:
        index, code, records = p
        lso = -1 if code else 100
        (w.int32(index).int16(code).int64(lso).int64(lso).int64(0 if not code else -1)
         .array([], lambda a, x: None).int32(-1).blob(records).tags())

    def topic(w: Writer, _: int) -> None:
        w.string(TOPIC).array(parts, part).tags()

    raw = Writer(True).int32(0).int16(0).int32(0).array([0], topic).tags().getvalue()
    return Reader(raw, True)


class FakeConnection:
    def __init__(self, respond: Callable[[dict[int, int]], list[Part]]) -> None:
        self.respond = respond
        self.asked: list[dict[int, int]] = []  # per request: partition -> fetch offset

    def version(self, api: object, ceiling: int | None = None) -> int:
        return 12

    async def request(self, api: object, version: int, body: bytes) -> Reader:
        r = Reader(body, True)
        for _ in range(4):
            r.int32()
        r.int8(), r.int32(), r.int32()
        asked: dict[int, int] = {}

        def part(p: Reader) -> None:
            index, _, offset = p.int32(), p.int32(), p.int64()
            p.int32(), p.int64(), p.int32()
            p.tags()
            asked[index] = offset

        def topic(t: Reader) -> None:
            t.string()
            t.array(part)
            t.tags()

        r.array(topic)
        self.asked.append(asked)
        return answer(self.respond(asked))


class FakeCluster:
    def __init__(self, conn: FakeConnection) -> None:
        self.settings = settings_from_config({"bootstrap.servers": "fake:9092"})
        self.conn = conn
        self.topic_ids: dict[str, object] = {}

    async def leader(self, topic: str, partition: int) -> int:
        return 1

    async def connection(self, node: int) -> FakeConnection:
        return self.conn

    def forget_leader(self, topic: str, partition: int) -> None:
        pass

    def drop_node(self, node: int) -> None:
        pass


def run(conn: FakeConnection, checks: list[LogCheckRequest]) -> list[tuple[LogOutcome,
                                                                            object]]:
    async def go() -> list[tuple[LogOutcome, object]]:
        got = await lc.log_checks(FakeCluster(conn), checks, budget_s=0.2)  # type: ignore[arg-type]
        return [(r.outcome, r.reason) for r in got]
    return asyncio.run(go())


def test_a_partitions_error_in_the_shared_answer_is_that_partitions_alone() -> None:
    not_leader = e.ERROR_CODES["NOT_LEADER_OR_FOLLOWER"]
    conn = FakeConnection(lambda asked: [
        (p, not_leader if p == 1 else 0, b"" if p == 1 else batch(10) + batch(11, control=True)
         + batch(12) + batch(13, control=True)) for p in asked])
    checks = [LogCheckRequest(TOPIC, 0, 10, PID, EPOCH), LogCheckRequest(TOPIC, 1, 10, PID, EPOCH),
              LogCheckRequest(TOPIC, 0, 12, PID, EPOCH)]
    assert run(conn, checks) == [(LogOutcome.COMMITTED, None),
                                 (LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR),
                                 (LogOutcome.COMMITTED, None)]
    # Both partitions in the first request; only partition 1 asked again (its leader moved).
    assert conn.asked[0] == {0: 10, 1: 10}
    assert len(conn.asked) > 1 and all(a == {1: 10} for a in conn.asked[1:])


def test_a_partition_the_shared_answer_left_empty_is_asked_alone() -> None:
    def respond(asked: dict[int, int]) -> list[Part]:
        # Shared, partition 1 gets nothing (partition 0's batch took the answer's bytes).
        alone = len(asked) == 1
        return [(p, 0, batch(20) + batch(21, control=True) if p == 0 or alone else b"")
                for p in asked]

    conn = FakeConnection(respond)
    checks = [LogCheckRequest(TOPIC, 0, 20, PID, EPOCH), LogCheckRequest(TOPIC, 1, 20, PID, EPOCH)]
    assert run(conn, checks) == [(LogOutcome.COMMITTED, None), (LogOutcome.COMMITTED, None)]
    assert conn.asked == [{0: 20, 1: 20}, {1: 20}]


def test_a_shared_answer_reaches_every_span_of_both_partitions_at_once() -> None:
    records = b"".join(batch(30 + 2 * i) + batch(31 + 2 * i, control=True) for i in range(8))
    conn = FakeConnection(lambda asked: [(p, 0, records) for p in asked])
    checks = [LogCheckRequest(TOPIC, p, 30 + 2 * i, PID, EPOCH) for i in range(8) for p in (0, 1)]
    assert run(conn, checks) == [(LogOutcome.COMMITTED, None)] * 16
    assert conn.asked == [{0: 30, 1: 30}]


def test_a_partition_the_leader_does_not_answer_for_is_asked_again() -> None:
    # The leader answers for partition 0 only: partition 1 is not a verdict, it is asked again.
    conn = FakeConnection(lambda asked: [(0, 0, batch(40))] if 0 in asked else [])
    checks = [LogCheckRequest(TOPIC, 0, 40, PID, EPOCH), LogCheckRequest(TOPIC, 1, 40, PID, EPOCH)]
    got = run(conn, checks)
    assert got == [(LogOutcome.COMMITTED, None), (LogOutcome.UNKNOWN, UnknownReason.FETCH_ERROR)]
    assert len(conn.asked) > 2 and all(a == {1: 40} for a in conn.asked[1:])
