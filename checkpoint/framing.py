"""The on-storage frame of every checkpoint file: pure functions, no I/O.

Layout (big-endian): magic (4 bytes) | format version (u16) | payload length (u32) |
crc32 (u32) | msgpack payload. The crc32 covers the magic, version, length and payload, so a
flipped version byte reads as corruption, not as a newer format. The frame itself is fixed for
all format versions; a version changes only what the payload means.

Design: docs/design.md section 6.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack

from checkpoint.errors import InvalidRecord, RecordCorrupt, UnsupportedFormatVersion

MAGIC = b"\x89TCK"
FORMAT_VERSION = 1
_HEAD = struct.Struct(">4sHI")
_CRC = struct.Struct(">I")
HEADER_SIZE = _HEAD.size + _CRC.size


def encode(payload: dict[str, Any]) -> bytes:
    """Frame ``payload`` (a msgpack-able map) as the bytes of one file."""
    try:
        body: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as e:
        raise InvalidRecord(f"record body is not msgpack-able: {e}") from e
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(body))
    crc = zlib.crc32(body, zlib.crc32(head))
    return head + _CRC.pack(crc) + body


def decode(path: str, data: bytes) -> dict[str, Any]:
    """The payload map of a file's bytes; RecordCorrupt or UnsupportedFormatVersion otherwise."""
    if len(data) < HEADER_SIZE:
        raise RecordCorrupt(path, f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, length = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise RecordCorrupt(path, f"bad magic {magic!r}: not a checkpoint file")
    if length != len(data) - HEADER_SIZE:
        raise RecordCorrupt(
            path, f"header says {length} payload bytes, file has {len(data) - HEADER_SIZE} (torn?)"
        )
    (stored_crc,) = _CRC.unpack_from(data, _HEAD.size)
    crc = zlib.crc32(data[HEADER_SIZE:], zlib.crc32(data[: _HEAD.size]))
    if crc != stored_crc:
        raise RecordCorrupt(
            path, f"crc32 mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"
        )
    if version > FORMAT_VERSION:
        raise UnsupportedFormatVersion(path, version, FORMAT_VERSION)
    if version < 1:
        raise RecordCorrupt(path, f"format version {version} was never written")
    try:
        payload = msgpack.unpackb(data[HEADER_SIZE:], raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        # TypeError: a map whose key is a list or a map (unhashable), which no writer stores.
        raise RecordCorrupt(path, f"payload is not valid msgpack: {e}") from e
    if not isinstance(payload, dict):
        raise RecordCorrupt(path, f"payload is a {type(payload).__name__}, not a map")
    return payload
