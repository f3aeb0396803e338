"""Record batches (magic 2) decoded whole: every record's offset, timestamp, key, value and headers,
and the control records (commit and abort markers). Pure: bytes in, records out.

Copy-forward (docs/design.md section 4) reads an aborted transaction's records back from the log
and writes them again; this is what reads them. The layout is Kafka's own
(clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java and
DefaultRecord.java): after the 61-byte batch header (record_batches.py) come `records_count`
records, each a varint length, an int8 attribute byte, a varlong timestamp delta, a varint offset
delta, a varint-length key and value (-1: null) and a varint count of headers, each a varint-length
UTF-8 name and a varint-length value (-1: null). A control batch holds one record whose key is
(version int16, type int16): type 0 is an abort marker, 1 a commit marker.

Why Kafka's framing is decoded here by hand but its compression is not: the framing is a few
dozen lines of varints over a format Kafka has kept stable since 0.11 (the header decoder beside
it already reads it), and decoding it ourselves keeps what we read exact (a consumer library would
skip aborted records, jump on an out-of-range offset, and hide producer ids and markers, which are
what decides here). A codec is another matter: gzip, snappy, lz4 and zstd are large, subtle
formats whose bugs are memory-safety and data bugs, so they are decoded by `cramjam`, a kept
library of the reference implementations' Rust ports (one wheel for all four). Only the framings
Kafka wraps around a codec are ours: Kafka's Java producer (and a broker that recompresses) writes
snappy in xerial's block framing, librdkafka writes a raw snappy block; both are read.

The batch CRC (CRC-32C) is not checked: what is read back is verified against the handle's record
counts and order-insensitive checksum (protocol/copies.py), which a corrupted record fails.

Design: docs/design.md section 4.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from twopc.control.errors import ProtocolError
from twopc.control.record_batches import HEADER_SIZE, BatchHeader, parse_header

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ATTR_LOG_APPEND_TIME = 0x08
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_LENGTH_PREFIX = 12  # baseOffset and batchLength precede what batchLength counts
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8), version (4), compatible version (4)
_I32 = struct.Struct(">i")
_CONTROL_KEY = struct.Struct(">hh")

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as the log holds it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Batch:
    """One record batch: its header and, for a data batch, its records; for a control batch,
    the marker type (CONTROL_ABORT, CONTROL_COMMIT, or another type a later Kafka defines)."""

    header: BatchHeader
    records: tuple[Record, ...]
    control_type: int | None = None

    @property
    def next_offset(self) -> int:
        return self.header.last_offset + 1


def decompress(codec: int, data: bytes) -> bytes:
    """The records section of a batch, uncompressed (`codec`: the attributes' low 3 bits)."""
    if codec == COMPRESSION_NONE:
        return data
    import cramjam  # imported on first use: only copy-forward reads records whole

    try:
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == COMPRESSION_SNAPPY:
            return _snappy(cramjam, data)
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))  # the LZ4 frame format (since magic 1)
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise ProtocolError(f"{CODEC_NAMES[codec]} records do not decompress: {exc}") from exc
    raise ProtocolError(f"unknown compression codec {codec}")


def _snappy(cramjam: object, data: bytes) -> bytes:
    snappy = cramjam.snappy  # type: ignore[attr-defined]
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(snappy.decompress_raw(data))
    # xerial's framing (snappy-java's SnappyOutputStream): a 16-byte header, then blocks of an
    # int32 length and a raw snappy block.
    out: list[bytes] = []
    pos = _XERIAL_HEADER
    while pos < len(data):
        if len(data) - pos < 4:
            raise ProtocolError("xerial snappy framing ends inside a block length")
        (size,) = _I32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise ProtocolError(f"xerial snappy block of {size} bytes overruns the batch")
        out.append(bytes(snappy.decompress_raw(data[pos:pos + size])))
        pos += size
    return b"".join(out)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (or varlong) at `pos`: (value, position after it)."""
    shift = 0
    raw = 0
    while True:
        if pos >= len(buf):
            raise ProtocolError("a record ends inside a varint")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise ProtocolError("a varint longer than 10 bytes")


def _blob(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise ProtocolError(f"a field of {n} bytes overruns its record")
    return buf[pos:end], end


def decode_records(header: BatchHeader, body: bytes) -> tuple[Record, ...]:
    """The records of one batch whose (uncompressed) records section is `body`."""
    log_append = bool(header.attributes & ATTR_LOG_APPEND_TIME)
    out: list[Record] = []
    pos = 0
    for i in range(header.records_count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise ProtocolError(f"record {i} of the batch at offset {header.base_offset} claims "
                                f"{length} bytes, {len(body) - pos} left")
        pos += 1  # attributes: unused since magic 2
        ts_delta, pos = _varint(body, pos)
        off_delta, pos = _varint(body, pos)
        key, pos = _blob(body, pos)
        value, pos = _blob(body, pos)
        count, pos = _varint(body, pos)
        if count < 0:
            raise ProtocolError(f"record {i} at offset {header.base_offset + off_delta} has "
                                f"{count} headers")
        headers: list[Header] = []
        for _ in range(count):
            name, pos = _blob(body, pos)
            hvalue, pos = _blob(body, pos)
            if name is None:
                raise ProtocolError("a record header with a null name")
            headers.append((name.decode("utf-8"), hvalue))
        if pos != end:
            raise ProtocolError(f"record {i} of the batch at offset {header.base_offset}: "
                                f"{end - pos} bytes left over")
        out.append(Record(header.base_offset + off_delta,
                          header.max_timestamp if log_append else header.base_timestamp + ts_delta,
                          key, value, tuple(headers)))
    if pos != len(body):
        raise ProtocolError(f"the batch at offset {header.base_offset} has {len(body) - pos} "
                            f"bytes after its {header.records_count} records")
    return tuple(out)


def decode_batches(records: bytes) -> list[Batch]:
    """Every whole batch of a fetched record set, in log order. A fetch may end inside a batch
    (the broker cuts at the byte limit): that fragment is left for the next fetch."""
    out: list[Batch] = []
    pos = 0
    while len(records) - pos >= HEADER_SIZE:
        header = parse_header(records, pos)
        end = pos + _LENGTH_PREFIX + header.batch_length
        if end > len(records):
            break
        body = decompress(header.compression, records[pos + HEADER_SIZE:end])
        if header.control:
            out.append(Batch(header, (), _control_type(header, body)))
        else:
            out.append(Batch(header, decode_records(header, body)))
        pos = end
    return out


def _control_type(header: BatchHeader, body: bytes) -> int:
    recs = decode_records(header, body)
    if len(recs) != 1 or recs[0].key is None or len(recs[0].key) < _CONTROL_KEY.size:
        raise ProtocolError(f"control batch at offset {header.base_offset} holds {len(recs)} "
                            "records, not one marker")
    _version, kind = _CONTROL_KEY.unpack_from(recs[0].key)
    return int(kind)
