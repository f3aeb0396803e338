"""The frame of every stored file: round-trips, and detects any truncation or flipped byte."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import msgpack
import pytest
from ckpt_support import bodies
from hypothesis import given
from hypothesis import strategies as st

from checkpoint import InvalidRecord, RecordCorrupt, UnsupportedFormatVersion
from checkpoint.framing import FORMAT_VERSION, HEADER_SIZE, MAGIC, decode, encode


@given(bodies)
def test_any_msgpack_body_round_trips(body: dict[str, Any]) -> None:
    assert decode("p", encode({"body": body})) == {"body": body}


@given(bodies, st.data())
def test_truncation_is_detected(body: dict[str, Any], data: st.DataObject) -> None:
    framed = encode({"body": body})
    cut = data.draw(st.integers(min_value=0, max_value=len(framed) - 1))
    with pytest.raises(RecordCorrupt) as e:
        decode("some/path", framed[:cut])
    assert e.value.path == "some/path"


@given(bodies, st.data())
def test_any_flipped_byte_is_detected(body: dict[str, Any], data: st.DataObject) -> None:
    framed = bytearray(encode({"body": body}))
    where = data.draw(st.integers(min_value=0, max_value=len(framed) - 1))
    flip = data.draw(st.integers(min_value=1, max_value=255))
    framed[where] ^= flip
    with pytest.raises(RecordCorrupt):
        decode("p", bytes(framed))


@given(bodies, st.binary(min_size=1, max_size=20))
def test_extra_trailing_bytes_are_detected(body: dict[str, Any], extra: bytes) -> None:
    with pytest.raises(RecordCorrupt):
        decode("p", encode({"body": body}) + extra)


def _frame(version: int, payload: bytes) -> bytes:
    head = struct.pack(">4sHI", MAGIC, version, len(payload))
    return head + struct.pack(">I", zlib.crc32(payload, zlib.crc32(head))) + payload


def test_newer_format_version_is_refused_clearly() -> None:
    framed = _frame(FORMAT_VERSION + 1, msgpack.packb({"body": {}}))
    with pytest.raises(UnsupportedFormatVersion) as e:
        decode("p", framed)
    assert e.value.version == FORMAT_VERSION + 1
    assert "upgrade" in str(e.value)


def test_well_framed_non_map_payload_is_corrupt() -> None:
    with pytest.raises(RecordCorrupt, match="not a map"):
        decode("p", _frame(FORMAT_VERSION, msgpack.packb([1, 2])))


def test_empty_file_is_corrupt_not_absent() -> None:
    with pytest.raises(RecordCorrupt, match=f"{HEADER_SIZE}-byte header"):
        decode("p", b"")


def test_unencodable_body_is_a_typed_error() -> None:
    with pytest.raises(InvalidRecord, match="msgpack"):
        encode({"body": {"when": object()}})
