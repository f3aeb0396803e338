"""Kafka wire-protocol primitives: a byte writer and a byte reader, nothing else.

Follows the protocol guide's primitive types: fixed-width big-endian integers, zig-zag varints,
classic (length-prefixed) and compact (length + 1 as unsigned varint) strings, bytes and arrays,
UUIDs and the tagged-field sections of flexible versions. No I/O here.

Design: docs/design.md section 3.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from twopc.control.errors import ProtocolError

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


class Writer:
    """Appends encoded primitives to a buffer; `flexible` selects compact encodings for strings,
    bytes and arrays (the caller still writes tagged-field sections explicitly)."""

    def __init__(self, flexible: bool = False) -> None:
        self.flexible = flexible
        self._buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def raw(self, data: bytes) -> Writer:
        self._buf += data
        return self

    def int8(self, v: int) -> Writer:
        self._buf += _I8.pack(v)
        return self

    def bool(self, v: bool) -> Writer:
        return self.int8(1 if v else 0)

    def int16(self, v: int) -> Writer:
        self._buf += _I16.pack(v)
        return self

    def uint16(self, v: int) -> Writer:
        self._buf += _U16.pack(v)
        return self

    def int32(self, v: int) -> Writer:
        self._buf += _I32.pack(v)
        return self

    def uint32(self, v: int) -> Writer:
        self._buf += _U32.pack(v)
        return self

    def int64(self, v: int) -> Writer:
        self._buf += _I64.pack(v)
        return self

    def float64(self, v: float) -> Writer:
        self._buf += _F64.pack(v)
        return self

    def uvarint(self, v: int) -> Writer:
        if v < 0 or v > 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {v}")
        while v >= 0x80:
            self._buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self._buf.append(v)
        return self

    def uvarlong(self, v: int) -> Writer:
        if v < 0 or v > 0xFFFFFFFFFFFFFFFF:
            raise ValueError(f"unsigned varlong out of range: {v}")
        while v >= 0x80:
            self._buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self._buf.append(v)
        return self

    def varint(self, v: int) -> Writer:
        if not -(2**31) <= v < 2**31:
            raise ValueError(f"varint out of range: {v}")
        return self.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> Writer:
        if not -(2**63) <= v < 2**63:
            raise ValueError(f"varlong out of range: {v}")
        return self.uvarlong(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def uuid(self, v: uuid.UUID | None) -> Writer:
        self._buf += (v or uuid.UUID(int=0)).bytes
        return self

    def _length(self, n: int | None) -> None:
        # Compact lengths store n + 1 so that 0 can mean null.
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.int16(-1 if n is None else n)

    def string(self, v: str | None) -> Writer:
        if v is None:
            self._length(None)
            return self
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        self._length(len(data))
        self._buf += data
        return self

    def blob(self, v: bytes | None) -> Writer:
        if self.flexible:
            self.uvarint(0 if v is None else len(v) + 1)
        else:
            self.int32(-1 if v is None else len(v))
        if v is not None:
            self._buf += v
        return self

    def array(self, items: Sequence[T] | None, put: Callable[[Writer, T], object]) -> Writer:
        if items is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.int32(-1)
            return self
        if self.flexible:
            self.uvarint(len(items) + 1)
        else:
            self.int32(len(items))
        for item in items:
            put(self, item)
        return self

    def tags(self, fields: dict[int, bytes] | None = None) -> Writer:
        """A tagged-field section: count, then (tag, size, data) in ascending tag order."""
        if not self.flexible:
            return self
        fields = fields or {}
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag).uvarint(len(fields[tag]))
            self._buf += fields[tag]
        return self


class Reader:
    """Reads primitives from a response body; raises ProtocolError on truncation."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.flexible = flexible
        self._data = memoryview(data)
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self._data) - self.pos

    @property
    def data(self) -> memoryview:
        """The whole body, for a decoder that scans a long array in place (`pos` is where it is
        at; it sets `pos` past what it took)."""
        return self._data

    def _take(self, n: int) -> memoryview:
        start = self._advance(n)
        return self._data[start:start + n]

    def _advance(self, n: int) -> int:
        """Moves past `n` bytes; returns where they start."""
        start = self.pos
        if n < 0 or start + n > len(self._data):
            raise ProtocolError(
                f"truncated data: wanted {n} bytes at {self.pos}, have {self.remaining}")
        self.pos = start + n
        return start

    # Fixed-width values are unpacked in place (no slice per value): a response of 64
    # transactions holds a few thousand of them, decoded on the driver's commit path.
    def _fixed(self, fmt: struct.Struct) -> int:
        return int(fmt.unpack_from(self._data, self._advance(fmt.size))[0])

    def fields(self, fmt: struct.Struct) -> tuple[Any, ...]:
        """Consecutive fixed-width values at once (a DescribeTransactions answer of a batch's
        pool has thousands of entries, decoded on the driver's commit path)."""
        return fmt.unpack_from(self._data, self._advance(fmt.size))

    def peek(self, n: int) -> bytes:
        """The next `n` bytes (fewer at the end), without moving past them."""
        return bytes(self._data[self.pos:self.pos + n])

    def raw(self, n: int) -> bytes:
        return bytes(self._take(n))

    def int8(self) -> int:
        return self._fixed(_I8)

    def bool(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        return self._fixed(_I16)

    def uint16(self) -> int:
        return self._fixed(_U16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def uint32(self) -> int:
        return self._fixed(_U32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def float64(self) -> float:
        return float(_F64.unpack_from(self._data, self._advance(8))[0])

    def _unsigned(self, max_bytes: int) -> int:
        pos = self.pos
        if pos < len(self._data) and not self._data[pos] & 0x80:  # one byte: the usual case
            self.pos = pos + 1
            return int(self._data[pos])
        result = 0
        for i in range(max_bytes):
            b = self._take(1)[0]
            result |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return result
        raise ProtocolError("varint too long")

    def uvarint(self) -> int:
        v = self._unsigned(5)
        if v > 0xFFFFFFFF:
            raise ProtocolError("unsigned varint exceeds 32 bits")
        return v

    def uvarlong(self) -> int:
        v = self._unsigned(10)
        if v > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolError("unsigned varlong exceeds 64 bits")
        return v

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        v = self.uvarlong()
        return (v >> 1) ^ -(v & 1)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def _length(self) -> int | None:
        if self.flexible:
            n = self.uvarint()
            return None if n == 0 else n - 1
        n = self.int16()
        return None if n < 0 else n

    def nullable_string(self) -> str | None:
        data, pos = self._data, self.pos
        if self.flexible and pos < len(data) and not data[pos] & 0x80:
            # A length below 127 in one byte, read in place: the usual case, and a pool's
            # DescribeTransactions answer on the commit path holds two strings per id.
            end = pos + data[pos]
            if end == pos:
                self.pos = pos + 1
                return None
            if end > len(data):
                raise ProtocolError(f"truncated data: wanted {end - pos - 1} bytes at "
                                    f"{pos + 1}, have {len(data) - pos - 1}")
            self.pos = end
            try:
                return str(data[pos + 1:end], "utf-8")
            except UnicodeDecodeError as exc:
                raise ProtocolError(f"string is not UTF-8: {exc}") from exc
        n = self._length()
        if n is None:
            return None
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"string is not UTF-8: {exc}") from exc

    def string(self) -> str:
        v = self.nullable_string()
        if v is None:
            raise ProtocolError("null where a string is required")
        return v

    def nullable_bytes(self) -> bytes | None:
        if self.flexible:
            n = self.uvarint()
            size = None if n == 0 else n - 1
        else:
            n = self.int32()
            size = None if n < 0 else n
        return None if size is None else bytes(self._take(size))

    def nullable_array(self, get: Callable[[Reader], T]) -> list[T] | None:
        if self.flexible:
            n = self.uvarint()
            count = None if n == 0 else n - 1
        else:
            n = self.int32()
            count = None if n < 0 else n
        if count is None:
            return None
        if count > self.remaining:
            # Every element takes at least one byte: a larger count is corrupt, not a huge list.
            raise ProtocolError(f"array count {count} exceeds the {self.remaining} bytes left")
        return [get(self) for _ in range(count)]

    def array(self, get: Callable[[Reader], T]) -> list[T]:
        return self.nullable_array(get) or []

    def tags(self) -> dict[int, bytes]:
        """Reads a tagged-field section (flexible versions only); unknown tags are kept raw."""
        if not self.flexible:
            return {}
        pos = self.pos
        if pos < len(self._data) and self._data[pos] == 0:  # none: the usual case
            self.pos = pos + 1
            return {}
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out
