"""AddPartitionsToTxn (client versions 0-3) and the many-partition ListOffsets, against bytes laid
out as the JSON message definitions say (the encoders behind `release_stranded`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control import messages as m
from twopc.control import partition_messages as pm
from twopc.control import txn_messages as tm
from twopc.control.errors import ERROR_CODES, UnsupportedBrokerError
from twopc.control.messages import ApiKey
from twopc.control.outcomes import ReleaseResult
from twopc.control.protocol import Reader, Writer

topics = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=1, max_size=12)
partition_lists = st.lists(st.tuples(topics, st.integers(0, 2**31 - 1)), min_size=1, max_size=8)


def _read_add_partitions(version: int, raw: bytes) -> tuple[str, int, int, dict[str, list[int]]]:
    flexible = version >= 3
    r = Reader(raw, flexible)
    tid, pid, epoch = r.string(), r.int64(), r.int16()
    found: dict[str, list[int]] = {}

    def topic(t: Reader) -> None:
        name = t.string()
        found[name] = t.array(Reader.int32)
        t.tags()

    r.array(topic)
    r.tags()
    assert r.remaining == 0
    return tid, pid, epoch, found


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(partitions=partition_lists, pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 32766))
def test_add_partitions_request_layout(version: int, partitions: list[tuple[str, int]], pid: int,
                                       epoch: int) -> None:
    raw = tm.encode_add_partitions_to_txn(version, "tx-é", pid, epoch, partitions)
    tid, got_pid, got_epoch, found = _read_add_partitions(version, raw)
    assert (tid, got_pid, got_epoch) == ("tx-é", pid, epoch)
    want: dict[str, set[int]] = {}
    for t, p in partitions:
        want.setdefault(t, set()).add(p)
    assert {t: sorted(ps) for t, ps in want.items()} == found  # grouped by topic, no repeats


def test_add_partitions_exact_bytes_v0_and_v3() -> None:
    v0 = tm.encode_add_partitions_to_txn(0, "t", 7, 2, [("a", 1)])
    assert v0 == (b"\x00\x01t" + (7).to_bytes(8, "big") + b"\x00\x02"
                  + b"\x00\x00\x00\x01" + b"\x00\x01a" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01")
    v3 = tm.encode_add_partitions_to_txn(3, "t", 7, 2, [("a", 1)])
    assert v3 == (b"\x02t" + (7).to_bytes(8, "big") + b"\x00\x02"
                  + b"\x02" + b"\x02a" + b"\x02" + b"\x00\x00\x00\x01" + b"\x00" + b"\x00")


@pytest.mark.parametrize("version", [4, 5, -1])
def test_add_partitions_refuses_broker_versions(version: int) -> None:
    with pytest.raises(ValueError, match="broker"):
        tm.encode_add_partitions_to_txn(version, "t", 1, 0, [("a", 0)])


@given(st.integers(0, 10), st.integers(0, 10))
def test_add_partitions_is_never_negotiated_above_3(low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    try:
        v = m.negotiate(ApiKey.ADD_PARTITIONS_TO_TXN, (low, high))
    except UnsupportedBrokerError:
        assert low > 3
        return
    assert low <= v <= min(high, 3)


def _add_partitions_answer(version: int, results: list[tuple[str, list[tuple[int, int]]]]) -> bytes:
    flexible = version >= 3

    def part(w: Writer, pc: tuple[int, int]) -> None:
        w.int32(pc[0]).int16(pc[1]).tags()

    def topic(w: Writer, t: tuple[str, list[tuple[int, int]]]) -> None:
        w.string(t[0]).array(t[1], part).tags()

    return Writer(flexible).int32(0).array(results, topic).tags().getvalue()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_response_decoding(version: int) -> None:
    ok = _add_partitions_answer(version, [("a", [(0, 0), (2, 0)]), ("b", [(1, 0)])])
    resp = tm.decode_add_partitions_to_txn(version, Reader(ok, version >= 3))
    assert resp.results == (("a", 0, 0), ("a", 2, 0), ("b", 1, 0)) and resp.error_code == 0
    # The partitions the broker skipped because of another's error carry OPERATION_NOT_ATTEMPTED;
    # the deciding code is the real one, wherever it is.
    fenced, skipped = ERROR_CODES["PRODUCER_FENCED"], ERROR_CODES["OPERATION_NOT_ATTEMPTED"]
    bad = _add_partitions_answer(version, [("a", [(0, skipped)]), ("b", [(1, fenced)])])
    assert tm.decode_add_partitions_to_txn(version, Reader(bad, version >= 3)).error_code == fenced
    only_skipped = _add_partitions_answer(version, [("a", [(0, skipped)])])
    assert tm.decode_add_partitions_to_txn(version, Reader(only_skipped,
                                                          version >= 3)).error_code == skipped


@given(partition_lists)
def test_list_offsets_latest_request_layout(partitions: list[tuple[str, int]]) -> None:
    r = Reader(pm.encode_list_offsets_latest(7, partitions), True)
    assert (r.int32(), r.int8()) == (-1, m.ISOLATION_READ_COMMITTED)
    found: list[tuple[str, int, int, int]] = []

    def topic(t: Reader) -> None:
        name = t.string()

        def part(p: Reader) -> None:
            found.append((name, p.int32(), p.int32(), p.int64()))
            p.tags()

        t.array(part)
        t.tags()

    r.array(topic)
    r.tags()
    assert r.remaining == 0
    assert found == [(t, p, -1, pm.LATEST) for t, p in sorted(set(partitions))]


def test_list_offsets_all_decoding() -> None:
    def part(w: Writer, x: tuple[int, int, int]) -> None:
        w.int32(x[0]).int16(x[1]).int64(-1).int64(x[2]).int32(5).tags()

    def topic(w: Writer, t: tuple[str, list[tuple[int, int, int]]]) -> None:
        w.string(t[0]).array(t[1], part).tags()

    raw = Writer(True).int32(0).array([("a", [(0, 0, 17), (1, 6, -1)]), ("b", [(3, 0, 4)])],
                                      topic).tags().getvalue()
    assert pm.decode_list_offsets_all(7, Reader(raw, True)) == {
        ("a", 0): (0, 17), ("a", 1): (6, -1), ("b", 3): (0, 4)}


def test_release_result() -> None:
    assert ReleaseResult("t", 1, 2, (("a", 0),)).released
    failed = ReleaseResult("t", 1, 2, (("a", 0),), "PRODUCER_FENCED", "add_partitions")
    assert not failed.released
