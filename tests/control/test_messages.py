"""Encoders and decoders of the control-plane APIs, against bytes laid out as the broker would."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control import messages as m
from twopc.control import partition_messages as pm
from twopc.control import txn_messages as tm
from twopc.control.errors import ProtocolError, UnsupportedBrokerError
from twopc.control.messages import ApiKey
from twopc.control.protocol import Reader, Writer


def test_request_headers() -> None:
    # v1 header for a non-flexible version, v2 (+ empty tag section) for a flexible one.
    v1 = b"\x00\x1a\x00\x01\x00\x00\x00\x07\x00\x01c"
    assert m.request_header(ApiKey.END_TXN, 1, 7, "c") == v1
    assert m.request_header(ApiKey.END_TXN, 3, 7, "c").endswith(b"\x00\x01c\x00")


def test_api_versions_answer_uses_header_v0() -> None:
    body = Writer(True).int16(0).array([(26, 0, 5)], lambda w, t: w.int16(t[0]).int16(t[1])
                                        .int16(t[2]).tags()).int32(0)
    feature = Writer(True).array([("transaction.version", 2)], lambda w, f: w.string(f[0])
                                 .int16(f[1]).int16(0).tags()).getvalue()
    frame = Writer().int32(9).getvalue() + body.tags({2: feature}).getvalue()
    corr, reader = m.response_body(ApiKey.API_VERSIONS, 3, frame)
    resp = m.decode_api_versions(3, reader)
    assert corr == 9 and resp.versions == {26: (0, 5)}
    assert resp.finalized_features == {"transaction.version": 2}


@given(st.integers(0, 10), st.integers(0, 10))
def test_end_txn_is_never_negotiated_above_4(low: int, high: int) -> None:
    if low > high:
        low, high = high, low
    try:
        v = m.negotiate(ApiKey.END_TXN, (low, high), 4)
    except UnsupportedBrokerError:
        assert low > 4
        return
    assert low <= v <= min(high, 4)


def test_negotiation_failures_name_the_api() -> None:
    with pytest.raises(UnsupportedBrokerError, match="DESCRIBE_TRANSACTIONS"):
        m.negotiate(ApiKey.DESCRIBE_TRANSACTIONS, None)
    with pytest.raises(UnsupportedBrokerError, match=r"3\.6"):
        m.negotiate(ApiKey.FETCH, (0, 11))
    with pytest.raises(ValueError, match="transaction-version-2"):
        tm.encode_end_txn(5, "t", 1, 0, True)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_end_txn_request_layout(version: int) -> None:
    flexible = version >= 3
    r = Reader(tm.encode_end_txn(version, "tx-1", 42, 3, True), flexible)
    assert (r.string(), r.int64(), r.int16(), r.bool()) == ("tx-1", 42, 3, True)
    r.tags()
    assert r.remaining == 0
    answer = Writer(flexible).int32(0).int16(90).tags().getvalue()
    assert tm.decode_end_txn(version, Reader(answer, flexible)) == 90


def test_describe_transactions_decoding() -> None:
    def topic(w: Writer, t: tuple[str, list[int]]) -> None:
        w.string(t[0]).array(t[1], Writer.int32).tags()

    def entry(w: Writer, _: int) -> None:
        (w.int16(0).string("tx").string("Ongoing").int32(60000).int64(1234).int64(7).int16(2)
         .array([("b", [1]), ("a", [3, 0])], topic).tags())

    raw = Writer(True).int32(0).array([0], entry).tags().getvalue()
    (e,) = tm.decode_describe_transactions(0, Reader(raw, True))
    assert (e.transactional_id, e.state, e.producer_id, e.producer_epoch) == ("tx", "Ongoing", 7, 2)
    assert (e.timeout_ms, e.start_ms) == (60000, 1234)
    assert e.partitions == (("a", 0), ("a", 3), ("b", 1))


_names = st.text(min_size=0, max_size=200)  # past 126 bytes a compact length takes two
_entries = st.lists(st.tuples(
    st.one_of(st.sampled_from([0, 105]), st.integers(-(2**15), 2**15 - 1)), _names,
    st.one_of(st.sampled_from(["", "Ongoing", "CompleteCommit"]), _names),
    st.lists(st.tuples(_names, st.lists(st.integers(0, 2**31 - 1), max_size=3)), max_size=3),
    st.dictionaries(st.integers(0, 5), st.binary(max_size=4), max_size=2)), max_size=20)


@given(_entries)
def test_describe_transactions_decoding_of_any_entries(entries: list[tuple[
        int, str, str, list[tuple[str, list[int]]], dict[int, bytes]]]) -> None:
    """A pool's answer is decoded on the commit path with fast paths (a one-byte string length,
    no partitions and no tagged fields): every other shape takes the general one, same result."""
    def topic(w: Writer, t: tuple[str, list[int]]) -> None:
        w.string(t[0]).array(t[1], Writer.int32).tags()

    def entry(w: Writer, e: tuple[int, str, str, list[tuple[str, list[int]]],
                                  dict[int, bytes]]) -> None:
        error, tid, state, topics, tags = e
        (w.int16(error).string(tid).string(state).int32(9).int64(8).int64(7).int16(6)
         .array(topics, topic).tags(tags))

    raw = Writer(True).int32(0).array(entries, entry).tags().getvalue()
    got = tm.decode_describe_transactions(0, Reader(raw, True))
    assert [(g.error_code, g.transactional_id, g.state, g.partitions) for g in got] == [
        (error, tid, state, tuple(sorted((name, p) for name, ps in topics for p in ps)))
        for error, tid, state, topics, _ in entries]
    assert all((g.timeout_ms, g.start_ms, g.producer_id, g.producer_epoch) == (9, 8, 7, 6)
               for g in got)
    with pytest.raises(ProtocolError):  # cut short anywhere: an error, never a wrong answer
        tm.decode_describe_transactions(0, Reader(raw[:-1], True))
    # The sweep's brief reading (open ids only) answers the same for every shape of entry.
    assert tm.decode_describe_states(0, Reader(raw, True)) == [
        (g.error_code, g.transactional_id, g.state) for g in got]
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            tm.decode_describe_states(0, Reader(raw[:cut], True))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_request(version: int) -> None:
    r = Reader(tm.encode_list_transactions(version, ["Ongoing"], "^p.*"), True)
    assert r.array(Reader.string) == ["Ongoing"]
    assert r.array(Reader.int64) == []
    if version >= 1:
        assert r.int64() == -1
    if version >= 2:
        assert r.nullable_string() == "^p.*"
    r.tags()
    assert r.remaining == 0


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_by_producer_id(version: int) -> None:
    r = Reader(tm.encode_list_transactions(version, [], None, [7, 1 << 40]), True)
    assert r.array(Reader.string) == []
    assert r.array(Reader.int64) == [7, 1 << 40]


@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator(version: int) -> None:
    r = Reader(m.encode_find_coordinator(version, ["a"]), True)
    if version >= 4:
        assert r.int8() == 1 and r.array(Reader.string) == ["a"]
        raw = Writer(True).int32(0).array(["a"], lambda w, k: w.string(k).int32(2)
                                          .string("h").int32(9).int16(0).string(None).tags())
    else:
        assert r.string() == "a" and r.int8() == 1
        raw = Writer(True).int32(0).int16(0).string(None).int32(2).string("h").int32(9)
    (c,) = m.decode_find_coordinator(version, Reader(raw.tags().getvalue(), True), ["a"])
    assert (c.key, c.node_id, c.host, c.port, c.error_code) == ("a", 2, "h", 9, 0)


@pytest.mark.parametrize("version", [12, 13])
def test_fetch_round_trip(version: int) -> None:
    tid = uuid.uuid4()
    target: str | uuid.UUID = tid if version >= 13 else "topic"
    req = Reader(pm.encode_fetch(version, target, 3, 100, 1024), True)
    assert [req.int32() for _ in range(4)] == [-1, 0, 1, 1024]
    assert req.int8() == m.ISOLATION_READ_COMMITTED
    req.int32(), req.int32()
    with pytest.raises(ValueError):
        pm.encode_fetch(version, "topic" if version >= 13 else tid, 3, 100, 1024)

    def part(w: Writer, _: int) -> None:
        # Tagged fields (here TruncationOffset, tag 0) always sit in the trailing tag section.
        (w.int32(3).int16(0).int64(50).int64(40).int64(10)
         .array([(7, 99)], lambda a, t: a.int64(t[0]).int64(t[1]).tags())
         .int32(-1).blob(b"xyz").tags({0: b"\x00" * 8}))

    def topic(w: Writer, _: int) -> None:
        (w.uuid(tid) if version >= 13 else w.string("topic"))
        w.array([0], part).tags()

    raw = Writer(True).int32(0).int16(0).int32(0).array([0], topic).tags().getvalue()
    top, (p,) = pm.decode_fetch(version, Reader(raw, True))
    assert top == 0
    assert (p.partition, p.high_watermark, p.last_stable_offset, p.log_start_offset) == (3, 50, 40,
                                                                                          10)
    assert p.aborted_transactions == ((7, 99),) and p.records == b"xyz"


def test_metadata_decoding() -> None:
    tid = uuid.uuid4()

    def part(w: Writer, i: int) -> None:
        w.int16(0).int32(i).int32(1).int32(5)
        for _ in range(3):
            w.array([1], Writer.int32)
        w.tags()

    def topic(w: Writer, _: int) -> None:
        w.int16(0).string("t").uuid(tid).bool(False).array([0, 1], part).int32(0).tags()

    raw = (Writer(True).int32(0)
           .array([0], lambda w, _: w.int32(1).string("h").int32(9092).string(None).tags())
           .string("cluster").int32(1).array([0], topic).tags().getvalue())
    md = m.decode_metadata(12, Reader(raw, True))
    assert md.brokers[0].port == 9092 and md.topics[0].topic_id == tid
    assert [p.partition for p in md.topics[0].partitions] == [0, 1]
    req = Reader(m.encode_metadata(12, ["t"]), True)
    assert req.array(lambda r: (r.uuid(), r.nullable_string(), r.tags())[1]) == ["t"]


def test_init_producer_id_and_sasl() -> None:
    r = Reader(tm.encode_init_producer_id(4, "tx", 60000), True)
    assert (r.string(), r.int32(), r.int64(), r.int16()) == ("tx", 60000, -1, -1)
    resp = tm.decode_init_producer_id(4, Reader(Writer(True).int32(0).int16(0).int64(8).int16(3)
                                              .tags().getvalue(), True))
    assert (resp.producer_id, resp.producer_epoch) == (8, 3)
    assert Reader(m.encode_sasl_handshake(1, "PLAIN")).string() == "PLAIN"
    auth = m.decode_sasl_authenticate(2, Reader(Writer(True).int16(58).string("bad").blob(b"")
                                                .int64(0).tags().getvalue(), True))
    assert (auth.error_code, auth.error_message) == (58, "bad")


@pytest.mark.parametrize("version", [12, 13])
def test_a_fetch_of_many_partitions_groups_them_by_topic(version: int) -> None:
    a, b = (uuid.uuid4(), uuid.uuid4()) if version >= 13 else ("a", "b")
    targets = [pm.FetchTarget(a, 0, 10, 100), pm.FetchTarget(b, 2, 20, 200),
               pm.FetchTarget(a, 1, 30, 300)]
    req = Reader(pm.encode_fetch_many(version, targets, 600), True)
    assert [req.int32() for _ in range(4)] == [-1, 0, 1, 600]
    req.int8(), req.int32(), req.int32()
    seen: list[tuple[object, int, int, int]] = []

    def part(r: Reader, topic: object) -> None:
        index, _, offset = r.int32(), r.int32(), r.int64()
        r.int32(), r.int64()
        seen.append((topic, index, offset, r.int32()))
        r.tags()

    def topic(r: Reader) -> None:
        name = r.uuid() if version >= 13 else r.string()
        r.array(lambda pr: part(pr, name))
        r.tags()

    req.array(topic)
    assert seen == [(a, 0, 10, 100), (a, 1, 30, 300), (b, 2, 20, 200)]

    def answer(w: Writer, item: tuple[object, int, int]) -> None:
        name, index, lso = item
        (w.uuid(name) if isinstance(name, uuid.UUID) else w.string(str(name)))
        w.array([0], lambda pw, _: pw.int32(index).int16(0).int64(lso).int64(lso).int64(0)
                .array([], lambda x, y: None).int32(-1).blob(b"").tags()).tags()

    raw = (Writer(True).int32(0).int16(0).int32(0)
           .array([(a, 0, 5), (b, 2, 6)], answer).tags().getvalue())
    top, parts = pm.decode_fetch_many(version, Reader(raw, True))
    assert top == 0 and [(t, p.partition, p.last_stable_offset) for t, p in parts] == [
        (a, 0, 5), (b, 2, 6)]


def _open_transactions_answer(ids: list[str], topics: list[str], partitions: int) -> bytes:
    """A DescribeTransactions answer naming `ids`, each Ongoing in `partitions` partitions of
    each of `topics`."""
    def topic(w: Writer, name: str) -> None:
        w.string(name).array(list(range(partitions)), Writer.int32).tags()

    def entry(w: Writer, tid: str) -> None:
        (w.int16(0).string(tid).string("Ongoing").int32(9).int64(8).int64(7).int16(6)
         .array(topics, topic).tags())

    return Writer(True).int32(0).array(ids, entry).tags().getvalue()


@pytest.mark.parametrize("partitions", [0, 1, 8, 125, 126, 127, 200])
@pytest.mark.parametrize("topics", [1, 2])
def test_describe_states_of_open_transactions_at_the_one_byte_bounds(partitions: int,
                                                                     topics: int) -> None:
    """An open transaction's entry (one topic, its partitions) is read in place while its counts
    take one byte; past that (127 partitions: a compact count of 128, two bytes; a second topic),
    the general path: the same answer either way, and an error wherever the answer is cut."""
    ids = [f"pool-{i}" for i in range(3)]
    raw = _open_transactions_answer(ids, [f"topic-{k}" for k in range(topics)], partitions)
    assert tm.decode_describe_states(0, Reader(raw, True)) == [(0, t, "Ongoing") for t in ids]
    for cut in range(len(raw)):
        with pytest.raises(ProtocolError):
            tm.decode_describe_states(0, Reader(raw[:cut], True))


def test_describe_states_refuses_a_topic_name_that_is_not_utf8() -> None:
    """Unread by the sweep, yet refused on the fast path as on the general one."""
    raw = _open_transactions_answer(["pool-0"], ["topic-X"], 2)
    assert tm.decode_describe_states(0, Reader(raw, True)) == [(0, "pool-0", "Ongoing")]
    with pytest.raises(ProtocolError):
        tm.decode_describe_states(0, Reader(raw.replace(b"topic-X", b"topic-\xff"), True))
    with pytest.raises(ProtocolError):
        tm.decode_describe_transactions(0, Reader(raw.replace(b"topic-X", b"topic-\xff"), True))
