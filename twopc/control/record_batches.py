"""The record batch v2 header: the first 61 bytes of a batch, read without touching its records.

The header is never compressed (only the records after it are), so this works for every codec.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from twopc.control.errors import ProtocolError

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
# Bytes of a batch counted by batchLength start after baseOffset and batchLength themselves.
_LENGTH_PREFIX = 12

ATTR_COMPRESSION_MASK = 0x07
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


class BatchHeader(NamedTuple):
    """A batch's header fields. A tuple, not a dataclass: a log check builds one for every batch
    a fetch returns (~80 per partition of a 64-transaction commit, on the control client's
    thread while the commit waits), and a frozen dataclass costs four times as much to build."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    def encode(self) -> bytes:
        return _HEADER.pack(*self)


def parse_header(records: bytes, pos: int = 0) -> BatchHeader:
    """The batch header at `pos`; ProtocolError unless it is a magic-2 batch of a sane length."""
    header = BatchHeader._make(_HEADER.unpack_from(records, pos))
    if header.magic != 2:
        raise ProtocolError(
            f"record batch at offset {header.base_offset} has magic {header.magic}, not 2: "
            "message formats before 0.11 carry no producer id")
    if header.batch_length < HEADER_SIZE - _LENGTH_PREFIX:
        raise ProtocolError(
            f"record batch at offset {header.base_offset} claims length {header.batch_length}")
    return header


def batch_headers(records: bytes) -> list[BatchHeader]:
    """Every complete-enough batch header in a fetched record set, in log order.

    A fetch may end with a partial batch; a trailing fragment shorter than a header is ignored, as
    consumers do. Anything else that is not a magic-2 batch is a ProtocolError, never guessed at.
    """
    out: list[BatchHeader] = []
    pos = 0
    while len(records) - pos >= HEADER_SIZE:
        header = parse_header(records, pos)
        out.append(header)
        pos += _LENGTH_PREFIX + header.batch_length
    return out
