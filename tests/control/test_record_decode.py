"""Record batches decoded whole, and the read-back scan's decisions, on bytes built here (the real
broker's bytes: test_readback.py)."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control.errors import ProtocolError
from twopc.control.protocol import Writer
from twopc.control.readback import Ending, ReadProblem, Scan
from twopc.control.record_batches import HEADER_SIZE, BatchHeader
from twopc.control.record_decode import Batch, Record, decode_batches, decompress

PID, EPOCH = 9, 3


def encode_record(r: Record, base_offset: int, base_ts: int) -> bytes:
    body = Writer().int8(0).varlong(r.timestamp - base_ts).varint(r.offset - base_offset)
    for blob in (r.key, r.value):
        body.varint(-1) if blob is None else body.varint(len(blob)).raw(blob)
    body.varint(len(r.headers))
    for name, value in r.headers:
        raw = name.encode()
        body.varint(len(raw)).raw(raw)
        body.varint(-1) if value is None else body.varint(len(value)).raw(value)
    data = body.getvalue()
    return Writer().varint(len(data)).getvalue() + data


def xerial(raw: bytes, block: int = 7) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(raw), block):
        chunk = bytes(cramjam.snappy.compress_raw(raw[i:i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return out


def encode_batch(records: list[Record], *, codec: int = 0, attrs: int = 0x10, pid: int = PID,
                 epoch: int = EPOCH, base: int | None = None) -> bytes:
    base = records[0].offset if base is None else base
    base_ts = min(r.timestamp for r in records)
    body = b"".join(encode_record(r, base, base_ts) for r in records)
    body = {0: lambda b: b, 1: lambda b: bytes(cramjam.gzip.compress(b)),
            2: xerial, 3: lambda b: bytes(cramjam.lz4.compress(b)),
            4: lambda b: bytes(cramjam.zstd.compress(b))}[codec](body)
    header = BatchHeader(base, HEADER_SIZE - 12 + len(body), 0, 2, 0, attrs | codec,
                         records[-1].offset - base, base_ts, max(r.timestamp for r in records),
                         pid, epoch, 0, len(records))
    return header.encode() + body


def marker(offset: int, kind: int, pid: int = PID, epoch: int = EPOCH) -> bytes:
    r = Record(offset, 5, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 0), ())
    return encode_batch([r], attrs=0x30, pid=pid, epoch=epoch)


blobs = st.one_of(st.none(), st.binary(max_size=40))
records = st.lists(st.tuples(blobs, blobs, st.lists(st.tuples(st.text(max_size=5), blobs),
                                                    max_size=3), st.integers(0, 10**6)),
                   min_size=1, max_size=20)


@given(records, st.integers(0, 4), st.integers(0, 2**40))
def test_records_round_trip_through_every_codec(
        rows: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
        codec: int, base: int) -> None:
    recs = [Record(base + i, 1_600_000_000_000 + ts, k, v, tuple(h))
            for i, (k, v, h, ts) in enumerate(rows)]
    raw = encode_batch(recs, codec=codec)
    (batch,) = decode_batches(raw + raw[:HEADER_SIZE + 3])  # a cut-off batch is left alone
    assert batch.records == tuple(recs) and batch.control_type is None


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    recs = [Record(0, 10, None, b"a", ()), Record(1, 20, None, b"b", ())]
    (batch,) = decode_batches(encode_batch(recs, attrs=0x18))
    assert [r.timestamp for r in batch.records] == [20, 20]


def test_markers_and_broken_bytes() -> None:
    (m,) = decode_batches(marker(7, 0))
    assert m.control_type == 0 and m.records == ()
    good = encode_batch([Record(0, 1, b"k", b"v", ())])
    with pytest.raises(ProtocolError):
        decode_batches(good[:-1] + b"\xff\xff")  # a length past the end
    with pytest.raises(ProtocolError):
        decompress(1, b"not gzip")


def batch(offsets: range, **kw: int) -> Batch:
    (b,) = decode_batches(encode_batch([Record(o, 1, None, b"v%d" % o, ()) for o in offsets],
                                       **kw))
    return b


def mark(offset: int, kind: int = 0, **kw: int) -> Batch:
    (b,) = decode_batches(marker(offset, kind, **kw))
    return b


def scan(expected: int = 4) -> Scan:
    return Scan("t", 0, 10, PID, EPOCH, expected)


def test_scan_keeps_ours_to_the_marker_and_passes_over_others() -> None:
    s = scan()
    s.feed([batch(range(10, 12)), batch(range(12, 14), pid=PID + 1)], 0, 100)
    assert not s.done and s.next_offset == 14
    s.feed([batch(range(14, 16)), mark(16, 0, epoch=EPOCH + 1)], 0, 100)
    r = s.result()
    assert r.ending is Ending.ABORTED and [x.offset for x in r.records] == [10, 11, 14, 15]
    c = scan(2)
    c.feed([batch(range(10, 12)), mark(12, 1)], 0, 100)
    assert c.result().ending is Ending.COMMITTED


@pytest.mark.parametrize(("feed", "problem"), [
    ([batch(range(10, 12), pid=PID + 1)], ReadProblem.NO_BATCH),
    ([batch(range(11, 13))], ReadProblem.NO_BATCH),
    ([batch(range(8, 12))], ReadProblem.NO_BATCH),
    ([mark(10)], ReadProblem.NO_BATCH),
    ([batch(range(10, 12), epoch=EPOCH + 1)], ReadProblem.OTHER_EPOCH),
    ([batch(range(10, 12), attrs=0)], ReadProblem.NOT_TRANSACTIONAL),
    ([batch(range(10, 15))], ReadProblem.TOO_MANY),
    ([batch(range(10, 12))], ReadProblem.NO_MARKER),
    ([batch(range(10, 12)), mark(12, epoch=EPOCH - 1)], ReadProblem.NO_BATCH),
])
def test_scan_names_what_does_not_fit(feed: list[Batch], problem: ReadProblem) -> None:
    s = scan()
    s.feed(feed, 0, max(b.next_offset for b in feed))  # the log ends after what is fed
    assert s.done and s.problem is problem and s.result().records == ()


def test_scan_below_the_log_start() -> None:
    s = scan()
    s.feed([], 11, 100)
    assert s.problem is ReadProblem.BELOW_LOG_START and "log start 11" in s.detail
