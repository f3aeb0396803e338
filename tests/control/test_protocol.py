"""Round-trips of every wire primitive, and known encodings from the protocol guide."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control.errors import ProtocolError
from twopc.control.protocol import Reader, Writer

INTS = [
    ("int8", st.integers(-(2**7), 2**7 - 1)),
    ("int16", st.integers(-(2**15), 2**15 - 1)),
    ("uint16", st.integers(0, 2**16 - 1)),
    ("int32", st.integers(-(2**31), 2**31 - 1)),
    ("uint32", st.integers(0, 2**32 - 1)),
    ("int64", st.integers(-(2**63), 2**63 - 1)),
    ("varint", st.integers(-(2**31), 2**31 - 1)),
    ("varlong", st.integers(-(2**63), 2**63 - 1)),
    ("uvarint", st.integers(0, 2**32 - 1)),
    ("uvarlong", st.integers(0, 2**64 - 1)),
]


@pytest.mark.parametrize(("kind", "values"), INTS, ids=[k for k, _ in INTS])
@given(data=st.data())
def test_integers_round_trip(kind: str, values: st.SearchStrategy[int],
                             data: st.DataObject) -> None:
    v = data.draw(values)
    raw = getattr(Writer(), kind)(v).getvalue()
    r = Reader(raw)
    assert getattr(r, kind)() == v
    assert r.remaining == 0


@given(st.booleans(), st.booleans())
def test_bool_round_trip(v: bool, flexible: bool) -> None:
    assert Reader(Writer(flexible).bool(v).getvalue(), flexible).bool() is v


@given(st.floats(allow_nan=False))
def test_float64_round_trip(v: float) -> None:
    assert Reader(Writer().float64(v).getvalue()).float64() == v


@given(st.uuids())
def test_uuid_round_trip(v: uuid.UUID) -> None:
    assert Reader(Writer().uuid(v).getvalue()).uuid() == v


@given(st.one_of(st.none(), st.text(max_size=200)), st.booleans())
def test_strings_round_trip(v: str | None, flexible: bool) -> None:
    r = Reader(Writer(flexible).string(v).getvalue(), flexible)
    assert r.nullable_string() == v
    assert r.remaining == 0


@given(st.one_of(st.none(), st.binary(max_size=300)), st.booleans())
def test_bytes_round_trip(v: bytes | None, flexible: bool) -> None:
    r = Reader(Writer(flexible).blob(v).getvalue(), flexible)
    assert r.nullable_bytes() == v


@given(st.one_of(st.none(), st.lists(st.integers(-(2**31), 2**31 - 1), max_size=50)),
       st.booleans())
def test_arrays_round_trip(v: list[int] | None, flexible: bool) -> None:
    r = Reader(Writer(flexible).array(v, Writer.int32).getvalue(), flexible)
    assert r.nullable_array(Reader.int32) == v


@given(st.dictionaries(st.integers(0, 1000), st.binary(max_size=20), max_size=5))
def test_tagged_fields_round_trip(fields: dict[int, bytes]) -> None:
    r = Reader(Writer(True).tags(fields).int8(7).getvalue(), True)
    assert r.tags() == fields
    assert r.int8() == 7


def test_known_encodings() -> None:
    # Zig-zag: 0, -1, 1, -2 -> 0, 1, 2, 3; 300 as an unsigned varint is AC 02.
    assert [Writer().varint(v).getvalue() for v in (0, -1, 1, -2)] == [b"\0", b"\1", b"\2", b"\3"]
    assert Writer().uvarint(300).getvalue() == b"\xac\x02"
    # Compact strings store length + 1; null is 0. Classic strings: int16 length, -1 for null.
    assert Writer(True).string("ab").getvalue() == b"\x03ab"
    assert Writer(True).string(None).getvalue() == b"\x00"
    assert Writer().string(None).getvalue() == b"\xff\xff"
    assert Writer(True).tags().getvalue() == b"\x00"
    assert Writer(False).tags().getvalue() == b""


@pytest.mark.parametrize("kind", ["int8", "int16", "int32", "int64", "uuid", "string"])
def test_truncated_input_is_a_protocol_error(kind: str) -> None:
    with pytest.raises(ProtocolError):
        getattr(Reader(b"\x00"), kind)() if kind != "int8" else Reader(b"").int8()


def test_overlong_varint_and_absurd_array_are_rejected() -> None:
    with pytest.raises(ProtocolError):
        Reader(b"\xff" * 6).uvarint()
    with pytest.raises(ProtocolError):
        Reader(b"\x00\x01\x00\x00").array(Reader.int8)  # 65536 elements in 0 bytes
    with pytest.raises(ProtocolError):
        Reader(b"\x00").string()  # compact-null read as classic: truncated
    with pytest.raises(ProtocolError):
        Reader(b"\x00", flexible=True).string()  # null where a string is required


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(ValueError):
        Writer().uvarint(-1)
    with pytest.raises(ValueError):
        Writer().varint(2**31)
