"""The record batch v2 header, read from raw bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc.control.errors import ProtocolError
from twopc.control.record_batches import HEADER_SIZE, BatchHeader, batch_headers


def header(base: int = 0, pid: int = 5, epoch: int = 0, attributes: int = 0x10,
           extra: int = 10, count: int = 3, magic: int = 2) -> BatchHeader:
    return BatchHeader(base, HEADER_SIZE - 12 + extra, 0, magic, 0, attributes, count - 1, 1, 2,
                       pid, epoch, 0, count)


headers = st.builds(
    header, base=st.integers(0, 2**40), pid=st.integers(-1, 2**50), epoch=st.integers(-1, 32767),
    attributes=st.integers(0, 0x3F), extra=st.integers(0, 40), count=st.integers(1, 100))


@given(st.lists(headers, min_size=1, max_size=5))
def test_headers_round_trip(batch_list: list[BatchHeader]) -> None:
    raw = b"".join(h.encode() + b"\x00" * (h.batch_length - (HEADER_SIZE - 12))
                   for h in batch_list)
    assert batch_headers(raw) == batch_list


def test_flags_and_sizes() -> None:
    assert HEADER_SIZE == 61
    h = header(attributes=0x10 | 0x04)  # transactional, zstd
    assert h.transactional and not h.control and h.compression == 4
    assert header(attributes=0x30).control
    assert header(base=10, count=5).last_offset == 14


def test_trailing_fragment_is_ignored_and_old_magic_refused() -> None:
    h = header()
    raw = h.encode() + b"\x00" * 10
    assert batch_headers(raw + raw[:30]) == [h]
    with pytest.raises(ProtocolError, match="magic 1"):
        batch_headers(header(magic=1).encode())
