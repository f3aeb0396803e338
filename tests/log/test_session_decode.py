"""A driver process reuses the records it already decoded, but only for the very same body."""

from __future__ import annotations

import uuid

import pytest

from checkpoint import open_log
from twopc.errors import InconsistentLog
from twopc.log.session import Session, decode_record
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Duplicates, Prepared, RecordFormatError, to_body


def _handle(tid: str) -> Handle:
    return Handle(tid, 7, 0, (PartitionSpan("t", 0, 10, None, 3, None),), 3, "m64v1:0", 1, 60000,
                  0, 0, 1)


def test_reread_reuses_the_decoded_record() -> None:
    log = open_log(f"memory://session-decode-{uuid.uuid4().hex}")
    Session(log).append(Prepared("0", (_handle("p-0-0"),)))
    first = Session(log)._records[0][1]
    again = Session(log)._records[0][1]
    assert again is first  # not decoded a second time
    assert again == Prepared("0", (_handle("p-0-0"),))


def test_a_record_appended_by_this_process_is_not_decoded_again() -> None:
    log = open_log(f"memory://session-decode-{uuid.uuid4().hex}")
    intent = Prepared("0", (_handle("p-0-0"), _handle("p-1-0")))
    session = Session(log)
    session.append(intent)
    session.append(Duplicates("0", ("p-2-0",)))
    assert session.state.batch("0").intent == intent.handles
    reread = Session(log)
    assert reread._records[0][1] is intent
    assert reread.state == session.state


def test_another_body_at_the_same_number_is_decoded_afresh() -> None:
    """A log deleted and started again at the same URL holds other records at the same numbers."""
    url = f"memory://session-decode-{uuid.uuid4().hex}"
    assert decode_record(url, 0, to_body(Duplicates("1", ("a-0-0",)))) == Duplicates("1", ("a-0-0",))
    assert decode_record(url, 0, to_body(Duplicates("2", ("b-0-0",)))) == Duplicates("2", ("b-0-0",))
    assert decode_record(url, 0, to_body(Duplicates("1", ("a-0-0",)))) == Duplicates("1", ("a-0-0",))


def test_a_corrupt_body_is_still_refused() -> None:
    url = f"memory://session-decode-{uuid.uuid4().hex}"
    assert decode_record(url, 0, to_body(Duplicates("1", ("a-0-0",)))) == Duplicates("1", ("a-0-0",))
    with pytest.raises(RecordFormatError):
        decode_record(url, 0, {"kind": "no-such-kind", "v": 1})


def test_a_session_names_a_corrupt_record() -> None:
    log = open_log(f"memory://session-decode-{uuid.uuid4().hex}")
    log.append(0, {"kind": "no-such-kind", "v": 1})
    with pytest.raises(InconsistentLog):
        Session(log)
